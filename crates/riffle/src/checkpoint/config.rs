//! Checkpointing and recovery settings: how often to checkpoint, where to, how many to keep, how
//! to restart after a failure, and what to restore at start.

use crate::util::setters;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};

/// Intervals below this are allowed but warned about (the seed's ADR-004: below 5 s the barrier
/// coordination overhead starts to dominate).
pub const SHORT_INTERVAL_WARNING: Duration = Duration::from_secs(5);

/// What a job does after a task fails.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RestartStrategy {
    /// Fail the job.
    None,
    /// Restart after `delay`, at most `attempts` times.
    FixedDelay {
        /// Restarts allowed over the job's life.
        attempts: u32,
        /// Wait before each restart.
        delay: Duration,
    },
    /// Restart after a delay that doubles (times `multiplier`) up to `max`, back to `initial`
    /// once the job ran `reset_after` without failing.
    ExponentialBackoff {
        /// First delay.
        initial: Duration,
        /// Largest delay.
        max: Duration,
        /// Growth factor of the delay.
        multiplier: f64,
        /// A run this long without failure resets the delay.
        reset_after: Duration,
    },
}

impl RestartStrategy {
    /// The delay before restart number `attempt` (1-based) after a run that lasted `ran`;
    /// `None` when the job must fail. `backoff` carries the current exponential delay (start
    /// with `None`). For drivers that restart jobs themselves, as a process group does.
    ///
    /// ```
    /// use std::time::Duration;
    /// use riffle::checkpoint::RestartStrategy;
    /// let strategy = RestartStrategy::FixedDelay { attempts: 2, delay: Duration::from_secs(1) };
    /// let mut backoff = None;
    /// assert_eq!(strategy.next_delay(2, Duration::ZERO, &mut backoff), Some(Duration::from_secs(1)));
    /// assert_eq!(strategy.next_delay(3, Duration::ZERO, &mut backoff), None);
    /// ```
    pub fn next_delay(
        &self,
        attempt: u32,
        ran: Duration,
        backoff: &mut Option<Duration>,
    ) -> Option<Duration> {
        match *self {
            RestartStrategy::None => None,
            RestartStrategy::FixedDelay { attempts, delay } => {
                (attempt <= attempts).then_some(delay)
            }
            RestartStrategy::ExponentialBackoff {
                initial,
                max,
                multiplier,
                reset_after,
            } => {
                let delay = match *backoff {
                    Some(previous) if ran < reset_after => previous.mul_f64(multiplier).min(max),
                    _ => initial,
                };
                *backoff = Some(delay);
                Some(delay)
            }
        }
    }
}

/// Where a job starts from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestoreFrom {
    /// The latest completed checkpoint in the job's checkpoint storage (a fresh start if none).
    Latest,
    /// A given checkpoint of the job's checkpoint storage.
    Checkpoint(u64),
    /// A savepoint: a directory or `s3://` location written by `savepoint`.
    Savepoint(String),
    /// The manifest in directory `dir` under `location`, whose files' paths are relative to
    /// `location`: what a process group composes from the snapshots of several processes
    /// ([`Manifest::compose`](crate::checkpoint::Manifest::compose)).
    Manifest {
        /// A directory or `s3://` location.
        location: String,
        /// The manifest's directory under it.
        dir: String,
    },
}

/// Checkpointing settings of a job.
///
/// Built from [`CheckpointConfig::default`] with its `with_*` setters, as
/// [`EnvConfig`](crate::EnvConfig) is.
///
/// ```
/// use std::time::Duration;
/// use riffle::checkpoint::{CheckpointConfig, RestartStrategy};
/// let checkpoints = CheckpointConfig::default()
///     .with_interval(Some(Duration::from_secs(10)))
///     .with_storage("/var/lib/riffle/checkpoints".into())
///     .with_restart(RestartStrategy::FixedDelay { attempts: 3, delay: Duration::from_secs(1) });
/// checkpoints.validate().unwrap();
/// ```
#[derive(Clone)]
pub struct CheckpointConfig {
    /// Time between checkpoints; `None` disables checkpointing.
    pub interval: Option<Duration>,
    /// Least time between the end of one checkpoint and the start of the next.
    pub min_pause: Duration,
    /// A checkpoint not complete after this long fails (the job goes on).
    pub timeout: Duration,
    /// Checkpoints that may fail in a row (storage errors, declines, timeouts) before the job
    /// fails with [`Error::TooManyFailedCheckpoints`], naming the last failure (Flink's
    /// `execution.checkpointing.tolerable-failed-checkpoints`). `None` (the default): the job
    /// goes on whatever fails. A process group's member sets 5 when it is `None`, so that a
    /// member that cannot checkpoint gives its partitions up.
    pub tolerable_failed_checkpoints: Option<u32>,
    /// Completed checkpoints kept; older ones are removed.
    pub retained: usize,
    /// Where checkpoints go: a directory, `file:///dir`, or `s3://bucket/prefix`.
    pub storage: String,
    /// S3 settings (`endpoint`, `region`, `access_key_id`, `secret_access_key`, `allow_http`);
    /// the `AWS_*` environment is read too. Never logged.
    pub storage_options: Vec<(String, String)>,
    /// Storage to use instead of `storage` (tests inject failures with it).
    pub object_store: Option<Arc<dyn object_store::ObjectStore>>,
    /// What to do when a task fails (a job without checkpoints fails).
    pub restart: RestartStrategy,
    /// What to restore at start.
    pub restore: Option<RestoreFrom>,
    /// Restore even if some state belongs to no operator of the job (it is dropped).
    pub allow_non_restored_state: bool,
    /// Unaligned checkpoints (Flink's FLIP-76): barriers overtake the records queued in the
    /// channels, and a task snapshots at the first barrier of its inputs instead of holding
    /// inputs back until all delivered it. The records overtaken (in flight) become part of
    /// the checkpoint, so checkpoints complete quickly under back-pressure, at the cost of
    /// larger checkpoints. Savepoints stay aligned. A checkpoint with records in flight
    /// restores only at the parallelism it was taken at. See [`CheckpointConfig::unaligned`].
    pub unaligned: bool,
    /// Files of the storage already held in memory, read by a restore instead of the store's
    /// copies (a process group's standby replicas; [`WarmFiles`](crate::checkpoint::WarmFiles)).
    pub warm_files: Option<crate::checkpoint::WarmFiles>,
    /// Completed checkpoints from this floor on are kept besides the newest
    /// [`retained`](Self::retained): a process group's run raises it to the checkpoint its
    /// last commit names, so that retention never removes a snapshot the group's committed
    /// offsets name (or that a commit in progress is about to name).
    pub retention_floor: Option<RetentionFloor>,
}

/// The oldest checkpoint a job's retention must keep, moved by someone outside the job (a
/// process group's commits): every completed checkpoint at or above it stays. A new floor keeps
/// everything until it is first raised. Cheap to clone; clones share the floor.
///
/// ```
/// use riffle::checkpoint::RetentionFloor;
/// let floor = RetentionFloor::new();
/// assert_eq!(floor.get(), 0);
/// floor.raise(7);
/// floor.raise(5); // never lowered
/// assert_eq!(floor.get(), 7);
/// ```
#[derive(Clone, Debug, Default)]
pub struct RetentionFloor(Arc<std::sync::atomic::AtomicU64>);

impl RetentionFloor {
    /// A floor at 0: every completed checkpoint is kept until the floor is raised.
    pub fn new() -> Self {
        Self::default()
    }

    /// Raises the floor to `id` (a lower `id` leaves it where it is).
    pub fn raise(&self, id: u64) {
        self.0.fetch_max(id, std::sync::atomic::Ordering::AcqRel);
    }

    /// The floor now.
    pub fn get(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }
}

impl std::fmt::Debug for CheckpointConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointConfig")
            .field("interval", &self.interval)
            .field("min_pause", &self.min_pause)
            .field("timeout", &self.timeout)
            .field(
                "tolerable_failed_checkpoints",
                &self.tolerable_failed_checkpoints,
            )
            .field("retained", &self.retained)
            .field("storage", &self.storage)
            .field(
                "storage_options",
                &self
                    .storage_options
                    .iter()
                    .map(|(k, _)| k)
                    .collect::<Vec<_>>(),
            )
            .field("restart", &self.restart)
            .field("restore", &self.restore)
            .field("allow_non_restored_state", &self.allow_non_restored_state)
            .field("unaligned", &self.unaligned)
            .field("warm_files", &self.warm_files)
            .field("retention_floor", &self.retention_floor)
            .finish()
    }
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig {
            interval: None,
            min_pause: Duration::ZERO,
            timeout: Duration::from_secs(600),
            tolerable_failed_checkpoints: None,
            retained: 3,
            storage: "riffle-checkpoints".into(),
            storage_options: Vec::new(),
            object_store: None,
            restart: RestartStrategy::FixedDelay {
                attempts: 3,
                delay: Duration::from_secs(1),
            },
            restore: None,
            allow_non_restored_state: false,
            unaligned: false,
            warm_files: None,
            retention_floor: None,
        }
    }
}

impl CheckpointConfig {
    setters! {
        /// Sets [`interval`](Self::interval) (`None`: no checkpoints).
        with_interval => interval: Option<Duration>;
        /// Sets [`min_pause`](Self::min_pause).
        with_min_pause => min_pause: Duration;
        /// Sets [`timeout`](Self::timeout).
        with_timeout => timeout: Duration;
        /// Sets [`tolerable_failed_checkpoints`](Self::tolerable_failed_checkpoints).
        with_tolerable_failed_checkpoints => tolerable_failed_checkpoints: Option<u32>;
        /// Sets [`retained`](Self::retained).
        with_retained => retained: usize;
        /// Sets [`storage`](Self::storage).
        with_storage => storage: String;
        /// Sets [`storage_options`](Self::storage_options).
        with_storage_options => storage_options: Vec<(String, String)>;
        /// Sets [`object_store`](Self::object_store).
        with_object_store => object_store: Option<Arc<dyn object_store::ObjectStore>>;
        /// Sets [`restart`](Self::restart).
        with_restart => restart: RestartStrategy;
        /// Sets [`restore`](Self::restore).
        with_restore => restore: Option<RestoreFrom>;
        /// Sets [`allow_non_restored_state`](Self::allow_non_restored_state).
        with_allow_non_restored_state => allow_non_restored_state: bool;
    }

    /// These settings with unaligned checkpoints on or off (Flink's
    /// `enableUnalignedCheckpoints`).
    ///
    /// With unaligned checkpoints a barrier does not wait behind the records queued ahead of it:
    /// each task snapshots at the first barrier of its inputs and forwards it at once, ahead of
    /// its queued output; the records it overtakes (queued output, and input that arrives on the
    /// other channels before their barrier) are written into the checkpoint and replayed on
    /// restore before any new input. Under heavy back-pressure a checkpoint then takes about
    /// the time of one batch per task instead of the time to drain every queue.
    ///
    /// Exactly-once sinks work with them as with aligned checkpoints (pre-commit at the task's
    /// snapshot, commit on completion). Savepoints are always aligned. A checkpoint that holds
    /// in-flight records restores only at the parallelism it was taken at (restoring at
    /// another parallelism fails and says so): rescale from a savepoint. Needs a checkpoint
    /// `interval`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use riffle::checkpoint::CheckpointConfig;
    /// let checkpoints = CheckpointConfig {
    ///     interval: Some(Duration::from_secs(10)),
    ///     ..CheckpointConfig::default()
    /// }
    /// .unaligned(true);
    /// assert!(checkpoints.unaligned);
    /// checkpoints.validate().unwrap();
    /// assert!(CheckpointConfig::default().unaligned(true).validate().is_err());
    /// ```
    pub fn unaligned(mut self, unaligned: bool) -> Self {
        self.unaligned = unaligned;
        self
    }

    /// Checks the settings; the error names the first bad one.
    pub fn validate(&self) -> Result<()> {
        if let Some(interval) = self.interval {
            if interval.is_zero() {
                return Err(Error::config(
                    "checkpoint interval",
                    "must be greater than zero",
                ));
            }
            if interval < SHORT_INTERVAL_WARNING {
                tracing::warn!(
                    interval_ms = interval.as_millis() as u64,
                    "checkpoint interval under 5 s: barrier coordination and uploads may dominate (ADR-004 advises 10-60 s)"
                );
            }
        }
        if self.timeout.is_zero() {
            return Err(Error::config(
                "checkpoint timeout",
                "must be greater than zero",
            ));
        }
        if self.unaligned && self.interval.is_none() {
            return Err(Error::config(
                "unaligned checkpoints",
                "need a checkpoint interval (checkpoints are off)",
            ));
        }
        if self.retained == 0 {
            return Err(Error::config("retained checkpoints", "must be at least 1"));
        }
        if self.storage.trim().is_empty() && self.object_store.is_none() {
            return Err(Error::config("checkpoint storage", "must not be empty"));
        }
        if let RestartStrategy::ExponentialBackoff {
            multiplier,
            initial,
            max,
            ..
        } = self.restart
            && (!(multiplier >= 1.0 && multiplier.is_finite()) || initial > max)
        {
            return Err(Error::config(
                "restart strategy",
                "needs a multiplier >= 1 and initial <= max",
            ));
        }
        Ok(())
    }

    /// Whether the job takes checkpoints.
    pub fn enabled(&self) -> bool {
        self.interval.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_strategies() {
        let fixed = RestartStrategy::FixedDelay {
            attempts: 2,
            delay: Duration::from_millis(5),
        };
        let mut b = None;
        assert_eq!(
            fixed.next_delay(1, Duration::ZERO, &mut b),
            Some(Duration::from_millis(5))
        );
        assert_eq!(fixed.next_delay(3, Duration::ZERO, &mut b), None);
        let backoff = RestartStrategy::ExponentialBackoff {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(300),
            multiplier: 2.0,
            reset_after: Duration::from_secs(60),
        };
        let mut b = None;
        let delays: Vec<_> = (1..=4)
            .map(|a| {
                backoff
                    .next_delay(a, Duration::from_secs(1), &mut b)
                    .unwrap()
                    .as_millis()
            })
            .collect();
        assert_eq!(delays, vec![100, 200, 300, 300]);
        assert_eq!(
            backoff.next_delay(5, Duration::from_secs(120), &mut b),
            Some(Duration::from_millis(100)),
            "reset"
        );
        assert_eq!(
            RestartStrategy::None.next_delay(1, Duration::ZERO, &mut b),
            None
        );
    }

    #[test]
    fn bad_settings_are_named() {
        let bad = CheckpointConfig {
            retained: 0,
            ..CheckpointConfig::default()
        };
        assert!(
            matches!(bad.validate(), Err(Error::Config { setting, .. }) if setting == "retained checkpoints")
        );
    }
}

//! Job configuration: parallelism, key groups, batching and flow control.
//!
//! Every value is checked before a job starts; a bad one fails with [`Error::Config`] naming the
//! setting, never later in the middle of a run.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::checkpoint::CheckpointConfig;
use crate::error::{Error, Result};
use crate::state::{HeapBackend, StateBackend};
use crate::time::{Clock, SystemClock};
use crate::util::setters;

/// The largest supported `max_parallelism` (number of key groups), as in Flink.
pub const MAX_KEY_GROUPS: usize = 32_768;

/// Settings of a [`StreamEnv`](crate::StreamEnv) and of the jobs it runs.
///
/// Build it from [`EnvConfig::default`] (or [`EnvConfig::deterministic`]) with its `with_*`
/// setters, one per setting: a program written so keeps compiling when a release adds a
/// setting. (A struct literal with `..EnvConfig::default()` works in this release too; the
/// struct becomes `#[non_exhaustive]` in the next, see CHANGELOG.md.)
///
/// ```
/// use std::time::Duration;
/// let config = riffle::EnvConfig::default()
///     .with_parallelism(2)
///     .with_buffer_timeout(Duration::from_millis(5));
/// config.validate().unwrap();
/// assert_eq!(config.parallelism, 2);
/// ```
#[derive(Clone, Debug)]
pub struct EnvConfig {
    /// Name of the job, shown in logs and metrics.
    pub job_name: String,
    /// Default number of parallel subtasks of each operator (default: the machine's cores).
    pub parallelism: usize,
    /// Number of key groups: the upper bound on the parallelism of keyed operators and the unit
    /// in which keyed state moves between subtasks (default 128).
    pub max_parallelism: usize,
    /// Records per batch on a channel between tasks: a buffer is sent when it is full...
    pub buffer_size: usize,
    /// ...or when it has waited this long (default 5 ms). Lower means less latency, more overhead.
    pub buffer_timeout: Duration,
    /// Batches a channel between two subtasks holds before its producer blocks (the credits).
    /// In-flight memory is bounded by `channel_capacity * buffer_size` records per channel.
    pub channel_capacity: usize,
    /// Directory where dead-letter records go when a source's dead-letter output is not
    /// consumed by the job itself.
    pub dead_letter_dir: PathBuf,
    /// [`StreamEnv::execute`](crate::StreamEnv::execute) returns [`Error::DeadLettered`] when
    /// any record was dead-lettered, after the run completed and committed its output (for
    /// tests and CI, where a bad line must not pass unnoticed). Off by default: a run with bad
    /// records succeeds and says where they went.
    pub fail_on_dead_letters: bool,
    /// How often sources emit watermarks (default 200 ms, as Flink).
    pub watermark_interval: Duration,
    /// Sources emit their watermark after every batch they read, not only every
    /// `watermark_interval` (with `buffer_size` 1: after every record, the last one included),
    /// as a strategy's `with_watermark_after_every_batch` does for one source. Set by
    /// [`EnvConfig::deterministic`].
    pub watermark_after_every_batch: bool,
    /// How often each source subtask sends a latency marker through the pipeline (default 1 s;
    /// `None` turns latency tracking off). Each operator records how long markers took to reach
    /// it: at the sinks, the end-to-end latency of the pipeline (queues and back-pressure
    /// included; time records wait in windows is not).
    pub latency_interval: Option<Duration>,
    /// Processing time: the wall clock, or a manual clock in tests.
    pub clock: Arc<dyn Clock>,
    /// Checkpoints, recovery and restore (off unless `checkpoints.interval` is set).
    pub checkpoints: CheckpointConfig,
    /// Where keyed state lives: the heap (default) or an embedded store such as RocksDB.
    pub state_backend: Arc<dyn StateBackend>,
    /// Local working directory of embedded state stores and their checkpoints before upload
    /// (default: `riffle-state` under the system temporary directory). Ephemeral: a restart
    /// restores from checkpoint storage, not from here. Each process works in a directory of
    /// its own under it (`process-<pid>-<nonce>`, locked while it lives), and removes those of
    /// processes that died (a SIGKILL leaves its stores behind).
    pub local_state_dir: PathBuf,
    /// When a job ends, its tasks free their keyed state on the heap, entry by entry (default).
    /// Off, the heap state of a job that finished is left to the process's exit: for a
    /// process that ends with its job (the `riffle` commands that run one job), where freeing
    /// a large state only delays the exit (a tenth of a Nexmark Top-N's CPU on a million
    /// events). A run that fails or is cancelled frees its state either way, and a store
    /// (RocksDB) is always closed.
    pub free_state_at_end: bool,
}

impl Default for EnvConfig {
    fn default() -> Self {
        EnvConfig {
            job_name: "riffle-job".to_string(),
            parallelism: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            max_parallelism: 128,
            buffer_size: 1024,
            buffer_timeout: Duration::from_millis(5),
            channel_capacity: 8,
            dead_letter_dir: PathBuf::from("riffle-dead-letter"),
            fail_on_dead_letters: false,
            watermark_interval: Duration::from_millis(200),
            watermark_after_every_batch: false,
            latency_interval: Some(Duration::from_secs(1)),
            clock: Arc::new(SystemClock),
            checkpoints: CheckpointConfig::default(),
            state_backend: Arc::new(HeapBackend),
            local_state_dir: std::env::temp_dir().join("riffle-state"),
            free_state_at_end: true,
        }
    }
}

impl EnvConfig {
    setters! {
        /// Sets [`job_name`](Self::job_name).
        with_job_name => job_name: String;
        /// Sets [`parallelism`](Self::parallelism).
        with_parallelism => parallelism: usize;
        /// Sets [`max_parallelism`](Self::max_parallelism).
        with_max_parallelism => max_parallelism: usize;
        /// Sets [`buffer_size`](Self::buffer_size).
        with_buffer_size => buffer_size: usize;
        /// Sets [`buffer_timeout`](Self::buffer_timeout).
        with_buffer_timeout => buffer_timeout: Duration;
        /// Sets [`channel_capacity`](Self::channel_capacity).
        with_channel_capacity => channel_capacity: usize;
        /// Sets [`dead_letter_dir`](Self::dead_letter_dir).
        with_dead_letter_dir => dead_letter_dir: PathBuf;
        /// Sets [`fail_on_dead_letters`](Self::fail_on_dead_letters).
        with_fail_on_dead_letters => fail_on_dead_letters: bool;
        /// Sets [`watermark_interval`](Self::watermark_interval).
        with_watermark_interval => watermark_interval: Duration;
        /// Sets [`watermark_after_every_batch`](Self::watermark_after_every_batch).
        with_watermark_after_every_batch => watermark_after_every_batch: bool;
        /// Sets [`latency_interval`](Self::latency_interval) (`None`: no latency tracking).
        with_latency_interval => latency_interval: Option<Duration>;
        /// Sets [`clock`](Self::clock).
        with_clock => clock: Arc<dyn Clock>;
        /// Sets [`checkpoints`](Self::checkpoints).
        with_checkpoints => checkpoints: CheckpointConfig;
        /// Sets [`state_backend`](Self::state_backend).
        with_state_backend => state_backend: Arc<dyn StateBackend>;
        /// Sets [`local_state_dir`](Self::local_state_dir).
        with_local_state_dir => local_state_dir: PathBuf;
        /// Sets [`free_state_at_end`](Self::free_state_at_end).
        with_free_state_at_end => free_state_at_end: bool;
    }

    /// Settings under which a small job's output does not depend on timing: parallelism 1,
    /// batches of one record, and a watermark after every record of every source (the last one
    /// included), so that lateness, windows and timers behave on a ten-line file as they would
    /// on a long stream. For tests and for trying a job on a small input; it costs throughput.
    ///
    /// ```
    /// use std::time::Duration;
    /// use riffle::{EnvConfig, Result, StreamEnv, operators::KeyedContext, sink::CollectSink};
    /// use riffle::time::WatermarkStrategy;
    ///
    /// let env = StreamEnv::with_config(EnvConfig::deterministic());
    /// let (sink, output) = CollectSink::new();
    /// env.from_iter_with_watermarks(
    ///     vec![(1u64, 10_000i64), (1, 20_000), (1, 1_000)],
    ///     WatermarkStrategy::bounded_out_of_orderness(Duration::ZERO).with_timestamps(|r: &(u64, i64)| r.1),
    /// )
    /// .key_by(|r| r.0)
    /// .process(|_: &u64, r: (u64, i64), ctx: &mut KeyedContext<u64, (i64, bool)>| -> Result<()> {
    ///     // The third record comes after the second one's watermark: it is late.
    ///     let late = ctx.timestamp().is_some_and(|t| t <= ctx.current_watermark());
    ///     ctx.emit((r.1, late))
    /// })
    /// .sink(sink);
    /// env.execute().unwrap();
    /// assert_eq!(output.values(), vec![(10_000, false), (20_000, false), (1_000, true)]);
    /// ```
    pub fn deterministic() -> Self {
        EnvConfig::default()
            .with_parallelism(1)
            .with_buffer_size(1)
            .with_watermark_after_every_batch(true)
    }

    /// Checks every setting; the error names the first bad one.
    pub fn validate(&self) -> Result<()> {
        if self.job_name.trim().is_empty() {
            return Err(Error::config("job_name", "must not be empty"));
        }
        check_parallelism("parallelism", self.parallelism, self.max_parallelism)?;
        if self.max_parallelism > MAX_KEY_GROUPS {
            return Err(Error::config(
                "max_parallelism",
                format!(
                    "must be at most {MAX_KEY_GROUPS}, got {}",
                    self.max_parallelism
                ),
            ));
        }
        if self.buffer_size == 0 {
            return Err(Error::config("buffer_size", "must be at least 1 record"));
        }
        if self.buffer_timeout.is_zero() {
            return Err(Error::config("buffer_timeout", "must be greater than zero"));
        }
        if self.channel_capacity == 0 {
            return Err(Error::config(
                "channel_capacity",
                "must be at least 1 batch",
            ));
        }
        if self.watermark_interval.is_zero() {
            return Err(Error::config(
                "watermark_interval",
                "must be greater than zero",
            ));
        }
        if self.latency_interval.is_some_and(|i| i.is_zero()) {
            return Err(Error::config(
                "latency_interval",
                "must be greater than zero (None turns latency tracking off)",
            ));
        }
        self.checkpoints.validate()?;
        Ok(())
    }
}

/// Checks an operator's parallelism against the job's number of key groups.
pub(crate) fn check_parallelism(
    setting: &str,
    parallelism: usize,
    max_parallelism: usize,
) -> Result<()> {
    if parallelism == 0 {
        return Err(Error::config(setting, "must be at least 1, got 0"));
    }
    if max_parallelism < parallelism {
        return Err(Error::config(
            "max_parallelism",
            format!("({max_parallelism}) must not be below {setting} ({parallelism})"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting_of(config: EnvConfig) -> String {
        match config.validate() {
            Err(Error::Config { setting, .. }) => setting,
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    #[test]
    fn default_is_valid() {
        EnvConfig::default().validate().unwrap();
    }

    #[test]
    fn bad_values_name_their_setting() {
        let base = EnvConfig {
            parallelism: 2,
            ..EnvConfig::default()
        };
        assert_eq!(
            setting_of(EnvConfig {
                parallelism: 0,
                ..base.clone()
            }),
            "parallelism"
        );
        assert_eq!(
            setting_of(EnvConfig {
                max_parallelism: 1,
                ..base.clone()
            }),
            "max_parallelism"
        );
        assert_eq!(
            setting_of(EnvConfig {
                max_parallelism: 100_000,
                ..base.clone()
            }),
            "max_parallelism"
        );
        assert_eq!(
            setting_of(EnvConfig {
                buffer_size: 0,
                ..base.clone()
            }),
            "buffer_size"
        );
        assert_eq!(
            setting_of(EnvConfig {
                buffer_timeout: Duration::ZERO,
                ..base.clone()
            }),
            "buffer_timeout"
        );
        assert_eq!(
            setting_of(EnvConfig {
                channel_capacity: 0,
                ..base.clone()
            }),
            "channel_capacity"
        );
        assert_eq!(
            setting_of(EnvConfig {
                job_name: " ".into(),
                ..base
            }),
            "job_name"
        );
    }
}

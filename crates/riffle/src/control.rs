//! The switches a running job's tasks, its checkpoint coordinator and its handle share: cancel,
//! fail the current attempt, stop (with or without a savepoint). Below both the runtime and the
//! checkpoint coordination, which read them.

use std::sync::atomic::{AtomicBool, Ordering};

/// Shared switches of a running job.
#[derive(Debug, Default)]
pub(crate) struct JobControl {
    cancelled: AtomicBool,
    attempt_failed: AtomicBool,
    stop_requested: AtomicBool,
    /// A source stopped at the barrier of a stop-with-savepoint in the current run.
    stopped_at_savepoint: AtomicBool,
}

impl JobControl {
    /// Stops every task as soon as possible; output may be partial.
    pub(crate) fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
    }

    /// A task of the current run failed: the other tasks stop.
    pub(crate) fn fail_attempt(&self) {
        self.attempt_failed.store(true, Ordering::Release);
    }

    /// A new run of the job starts.
    pub(crate) fn new_attempt(&self) {
        self.attempt_failed.store(false, Ordering::Release);
        self.stopped_at_savepoint.store(false, Ordering::Release);
    }

    /// A source ended its input at the barrier of a stop-with-savepoint.
    pub(crate) fn stopped_at_savepoint(&self) {
        self.stopped_at_savepoint.store(true, Ordering::Release);
    }

    /// Whether the current run was stopped with a savepoint (nothing after it may be committed).
    pub(crate) fn is_stopped_at_savepoint(&self) -> bool {
        self.stopped_at_savepoint.load(Ordering::Acquire)
    }

    /// Whether tasks must stop now (the job was cancelled, or the run failed).
    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire) || self.attempt_failed.load(Ordering::Acquire)
    }

    /// Whether the user cancelled the job.
    pub(crate) fn is_user_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    /// Asks sources to end their input; the pipeline then drains and finishes.
    pub(crate) fn stop(&self) {
        self.stop_requested.store(true, Ordering::Release);
    }

    pub(crate) fn is_stop_requested(&self) -> bool {
        self.stop_requested.load(Ordering::Acquire)
    }
}

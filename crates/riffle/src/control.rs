//! The switches a running job's tasks, its checkpoint coordinator and its handle share: cancel,
//! fail the current attempt, stop (with or without a savepoint). Below both the runtime and the
//! checkpoint coordination, which read them.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Shared switches of a running job.
#[derive(Debug, Default)]
pub(crate) struct JobControl {
    cancelled: AtomicBool,
    attempt_failed: AtomicBool,
    stop_requested: AtomicBool,
    /// A source stopped at the barrier of a stop-with-savepoint in the current run.
    stopped_at_savepoint: AtomicBool,
    /// The job leaves the heap state of its finished tasks to the process's exit
    /// ([`EnvConfig::free_state_at_end`](crate::EnvConfig::free_state_at_end) off).
    leaves_state: AtomicBool,
    /// The chains of the current run's tasks that finished, kept while `leaves_state`.
    retired: Mutex<Retired>,
}

/// What finished tasks left: freed when their run fails, left to the process's exit when the
/// job ends.
#[derive(Default)]
struct Retired(Vec<Box<dyn Send>>);

impl std::fmt::Debug for Retired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} retired chains", self.0.len())
    }
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

    /// Whether the job leaves its finished tasks' heap state to the process's exit.
    pub(crate) fn leave_state_at_end(&self, leave: bool) {
        self.leaves_state.store(leave, Ordering::Release);
    }

    /// What a task that finished its input leaves: its operators and their heap state. Freed
    /// here, unless the job leaves them to the process's exit (then kept until the run ends:
    /// [`free_retired`](Self::free_retired) if it fails, [`leave_retired`](Self::leave_retired)
    /// if the job ends).
    pub(crate) fn retire(&self, chain: Box<dyn Send>) {
        if self.leaves_state.load(Ordering::Acquire) {
            self.retired.lock().expect("retired lock").0.push(chain);
        }
    }

    /// Frees what the run's finished tasks left (the run failed: the next one starts over).
    pub(crate) fn free_retired(&self) {
        let retired = std::mem::take(&mut self.retired.lock().expect("retired lock").0);
        drop(retired);
    }

    /// Leaves what the finished tasks left to the process's exit: the job has ended, and
    /// freeing a large state entry by entry would only delay the exit.
    pub(crate) fn leave_retired(&self) {
        let retired = std::mem::take(&mut self.retired.lock().expect("retired lock").0);
        std::mem::forget(retired);
    }
}

//! The unit the job runs on a thread: a task driver owns a chain's head (a source or an input
//! gate) and runs its loop until the input ends, the job is cancelled, or something fails.

use crate::error::Result;

/// The loop of one task, run on its own thread.
pub(crate) trait TaskDriver: Send {
    /// Runs the task to its end. Dropping the driver afterwards closes its channels, which is how
    /// neighbours learn of a failure.
    fn run(self: Box<Self>) -> Result<()>;
}

//! The `riffle` command's library: the seed's clicks domain and its scenarios as demos, so that
//! the binary, the benchmarks and the end-to-end tests run the very same pipelines.

#![forbid(unsafe_code)]

pub mod clicks;
pub mod control;
pub mod demos;
pub mod generate;
pub mod group;
pub mod nexmark;
pub mod process;
pub mod progress;
pub mod savepoint;
pub mod serve;
pub mod sql;
pub mod sql_client;
#[cfg(feature = "kafka")]
pub mod sql_group;

use std::sync::atomic::{AtomicBool, Ordering};

/// Whether this process ends when its one job ends ([`ends_with_its_job`]).
static ENDS_WITH_ITS_JOB: AtomicBool = AtomicBool::new(false);

/// Says that this process runs one job and exits when it ends (set by `main` for `riffle sql
/// -f`, `riffle nexmark run` and the demos): its jobs then leave their heap state to the exit
/// instead of freeing it entry by entry ([`riffle::EnvConfig::free_state_at_end`]). Not set
/// for the commands that run several jobs in one process (the interactive SQL client, `riffle
/// serve`, the checkpoint-recovery demo), nor in tests, which run many.
pub fn ends_with_its_job() {
    ENDS_WITH_ITS_JOB.store(true, Ordering::Release);
}

/// Whether [`ends_with_its_job`] was said.
pub fn process_ends_with_its_job() -> bool {
    ENDS_WITH_ITS_JOB.load(Ordering::Acquire)
}

//! What sinks leave to be committed once every task of a run finished successfully (the commit
//! of a bounded job's last data), and how the run ended, told to them.

use crate::error::Result;

/// How a run whose every task finished successfully ended, told to the sinks' finalizers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The input was drained (a bounded job, or a stop without savepoint): commit everything.
    Drained,
    /// Stopped with a savepoint: nothing after its barrier may become visible. Commit what was
    /// pre-committed up to checkpoint `up_to` (the savepoint when it completed, else the last
    /// completed checkpoint; 0 for none) and leave the rest to be aborted when the job restores.
    Stopped {
        /// The last completed checkpoint or savepoint of the job.
        up_to: u64,
    },
}

/// What a sink leaves to be done once every task of the job finished successfully (the commit
/// of the last data of a bounded job).
pub type Finalizer = Box<dyn FnOnce(Ending) -> Result<()> + Send>;

/// The finalizers a run collects from its sinks, with the operator id and subtask of the sink
/// that left each: the coordinator runs a finished sink's own when a checkpoint holding its final
/// snapshot completes; the job runs what is left when it ends.
#[derive(Clone, Default)]
#[allow(clippy::type_complexity)]
pub(crate) struct Finalizers(
    pub(crate) std::sync::Arc<std::sync::Mutex<Vec<(Option<(String, usize)>, Finalizer)>>>,
);

impl std::fmt::Debug for Finalizers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Finalizers")
    }
}

impl Finalizers {
    /// Adds the finalizer of the sink `owner` (operator id, subtask), if known.
    pub(crate) fn push(&self, owner: Option<(String, usize)>, finalizer: Finalizer) {
        self.0
            .lock()
            .expect("finalizers lock")
            .push((owner, finalizer));
    }

    /// Takes every finalizer left.
    pub(crate) fn take(&self) -> Vec<Finalizer> {
        std::mem::take(&mut *self.0.lock().expect("finalizers lock"))
            .into_iter()
            .map(|(_, f)| f)
            .collect()
    }

    /// Takes the finalizers of subtask `subtask` of the sink operator `id`.
    pub(crate) fn take_for(&self, id: &str, subtask: usize) -> Vec<Finalizer> {
        let mut all = self.0.lock().expect("finalizers lock");
        let (mine, rest): (Vec<_>, Vec<_>) =
            std::mem::take(&mut *all)
                .into_iter()
                .partition(|(owner, _)| {
                    owner
                        .as_ref()
                        .is_some_and(|(o, s)| o == id && *s == subtask)
                });
        *all = rest;
        mine.into_iter().map(|(_, f)| f).collect()
    }
}

//! What a run executes, as the runtime sees it: the [`Planner`] that builds a run's tasks (the
//! job graph's planner, `crate::graph`, implements it; the runtime never imports it), what a run
//! shares with the tasks it builds ([`RunContext`]), and the plan as users see it ([`JobPlan`]).

use std::sync::Arc;

use serde::Serialize;

use crate::checkpoint::Finalizers;
use crate::checkpoint::coordinator::CheckpointHub;
use crate::checkpoint::restore::RestoreAssignment;
use crate::config::EnvConfig;
use crate::error::Result;
use crate::metrics::MetricsRegistry;
use crate::runtime::{JobControl, TaskSpec};

/// Builds the tasks of a job's runs: the runtime plans every attempt again (a restart restores
/// another checkpoint into new operator instances).
pub(crate) trait Planner: Send + 'static {
    /// Checks the job and its configuration before it starts.
    fn validate(&self, config: &EnvConfig) -> Result<()>;
    /// The number of tasks a run has.
    fn task_count(&self, config: &EnvConfig) -> Result<usize>;
    /// The tasks of one run, and its plan as users see it.
    fn plan(&self, run: &RunContext<'_>) -> Result<(Vec<TaskSpec>, JobPlan)>;
}

/// What a run of the job shares with its tasks.
pub(crate) struct RunContext<'a> {
    pub(crate) config: &'a EnvConfig,
    pub(crate) registry: &'a MetricsRegistry,
    pub(crate) control: &'a Arc<JobControl>,
    pub(crate) checkpoints: Option<Arc<CheckpointHub>>,
    pub(crate) restore: Option<&'a RestoreAssignment>,
    /// Unique per run of the job (a restart is a new run).
    pub(crate) run_id: String,
    pub(crate) finalizers: Finalizers,
}

/// The physical plan of a job, as shown to users: tasks (chains of operators) and their edges.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct JobPlan {
    /// One vertex per chain.
    pub vertices: Vec<PlanVertex>,
    /// Edges between vertices.
    pub edges: Vec<PlanEdge>,
}

/// A chain of operators run by `parallelism` tasks.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct PlanVertex {
    /// The chain's name: its operators joined with ` -> `.
    pub name: String,
    /// Operator names in chain order.
    pub operators: Vec<String>,
    /// Operator uids (`None` where none was set), in the same order.
    pub uids: Vec<Option<String>>,
    /// Number of parallel tasks.
    pub parallelism: usize,
}

/// A network edge between two chains.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct PlanEdge {
    /// Index of the producing vertex.
    pub from: usize,
    /// Index of the consuming vertex.
    pub to: usize,
    /// `FORWARD`, `REBALANCE`, `HASH` or `BROADCAST`.
    pub ship: String,
    /// `None` for the main output, the tag's name for a side output.
    pub side_output: Option<String>,
}

//! The job graph: the logical graph the DataStream API builds, and the planner that turns it into
//! tasks.
//!
//! # From the API to the tasks
//!
//! 1. **Logical graph** (this module). Every call of the DataStream API (`env.source(..)`,
//!    `.map(..)`, `.key_by(..)`, `.connect(..)`, `.sink(..)`) appends a [`Node`] to the job's list;
//!    a node names its inputs as [`Edge`]s (which node, which output [`Slot`], how records are
//!    spread: [`Ship`]) and says what it runs ([`NodeKind`]: a source, or a factory of an
//!    operator). Nodes refer to earlier nodes only, so the list is already in topological order.
//! 2. **Type erasure** ([`types`]). The typed API checks record types; the planner handles every
//!    stream as `Box<dyn Any>` and gets the typed pieces (channels, writers, input gates) from
//!    the stream's [`StreamType`], which knows its record type again. A mix-up is an error, never
//!    a panic.
//! 3. **Layout** ([`layout`]). Each operator's parallelism is resolved, stable operator ids are
//!    assigned (the `uid`, or one derived from the place and name), and every forward edge between
//!    operators of equal parallelism is chained: the consumer runs in the producer's task and is
//!    called directly. What remains are chains, one physical vertex each.
//! 4. **Channels** ([`channels`]). Every edge that is not chained gets bounded channels, one per
//!    pair of producer and consumer subtasks (forward edges of equal parallelism: one per pair of
//!    equal index).
//! 5. **Assembly** ([`assemble`]). For each chain and subtask, the operators are built from the
//!    tail backwards (each in front of its output: the next operator, a fan-out, or the network
//!    writer of a channel), with their state from the restored checkpoint and the task's
//!    key-value store; the head becomes a source task or an input task reading its channels.
//! 6. **Plan text** ([`plan`]). The same layout, described for users as a [`JobPlan`].
//!
//! The runtime ([`crate::runtime`]) then runs one thread per task.

mod assemble;
mod channels;
mod fingerprint;
mod layout;
mod plan;
mod types;

use std::any::Any;
use std::sync::Arc;

use crate::checkpoint::RestoreState;
use crate::config::EnvConfig;
use crate::error::{Error, Result};
use crate::operators::{OperatorContext, SideOutputs};
use crate::record::Data;
use crate::runtime::source_task::ErasedSource;
use crate::runtime::{IntoInput, KeyGroupFn, Output};

pub use crate::runtime::{JobPlan, PlanEdge, PlanVertex};
pub(crate) use assemble::plan;
pub(crate) use fingerprint::fingerprint;
pub use fingerprint::{FingerprintDifference, JobFingerprint};
pub(crate) use plan::describe_nodes;
pub(crate) use types::{StreamType, TypeOf};

use layout::layout;
use types::downcast;

/// A `Box<dyn Output<T>>` whose `T` the graph does not know.
pub(crate) type AnyOutput = Box<dyn Any + Send>;
/// Builds an operator instance in front of its output:
/// `(context, output, side outputs, state to restore) -> input`.
pub(crate) type BuildFn = dyn Fn(OperatorContext, AnyOutput, SideOutputs, Option<RestoreState>) -> Result<AnyOutput>
    + Send
    + Sync;
/// Builds the key-group function of a hash edge for a number of key groups.
pub(crate) type KeyGroupFactory = dyn Fn(usize) -> Box<dyn Any + Send> + Send + Sync;

/// Index of a node in the logical graph.
pub(crate) type NodeId = usize;

/// Which output of a node an edge reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    Main,
    Side(String),
}

/// How an edge spreads records over the consumer's subtasks.
#[derive(Clone)]
pub(crate) enum Ship {
    Forward,
    Rebalance,
    Broadcast,
    Hash(Arc<KeyGroupFactory>),
}

impl Ship {
    fn label(&self) -> &'static str {
        match self {
            Ship::Forward => "FORWARD",
            Ship::Rebalance => "REBALANCE",
            Ship::Broadcast => "BROADCAST",
            Ship::Hash(_) => "HASH",
        }
    }
}

/// An input of a node.
#[derive(Clone)]
pub(crate) struct Edge {
    pub(crate) from: NodeId,
    pub(crate) slot: Slot,
    pub(crate) ship: Ship,
    /// Type of the records on the edge's channels (the consumer's input type).
    pub(crate) ty: Arc<dyn StreamType>,
    /// Set on the edges into a multi-input operator, whose producers emit another type.
    pub(crate) into: Option<IntoInputEdge>,
}

/// How an edge into one input of a multi-input operator adapts its producer: the producer emits
/// `from`; `wrap` turns the writer of the consumer's input type (a `Box<dyn Output<U>>`) into an
/// output of the producer's type (a `Box<dyn Output<A>>`) that wraps each record.
#[derive(Clone)]
pub(crate) struct IntoInputEdge {
    pub(crate) from: Arc<dyn StreamType>,
    pub(crate) wrap: Arc<dyn Fn(AnyOutput) -> Result<AnyOutput> + Send + Sync>,
}

impl Edge {
    /// The type the producer of this edge emits.
    fn produced(&self) -> &Arc<dyn StreamType> {
        self.into.as_ref().map_or(&self.ty, |into| &into.from)
    }

    /// This edge (from a stream of `A`) as input of an operator reading `U`: records are wrapped
    /// by `wrap`; a hash edge keeps its key groups, which `unwrap` finds in a wrapped record.
    pub(crate) fn into_input<A: Data, U: Data>(
        self,
        wrap: fn(A) -> U,
        unwrap: fn(&U) -> Option<&A>,
    ) -> Edge {
        let ship = match self.ship {
            Ship::Hash(factory) => Ship::Hash(Arc::new(move |max_parallelism| {
                let of_a = match factory(max_parallelism).downcast::<KeyGroupFn<A>>() {
                    Ok(of_a) => *of_a,
                    // Handed on unchanged: the writer's `downcast` reports the mix-up.
                    Err(other) => return other,
                };
                let of_u: KeyGroupFn<U> =
                    Arc::new(move |value: &U| unwrap(value).map_or(0, |a| of_a(a)));
                Box::new(of_u)
            })),
            ship => ship,
        };
        Edge {
            from: self.from,
            slot: self.slot,
            ship,
            ty: TypeOf::<U>::arc(),
            into: Some(IntoInputEdge {
                from: self.ty,
                wrap: Arc::new(move |output: AnyOutput| {
                    let inner: Box<dyn Output<U>> = downcast(output)?;
                    Ok(Box::new(
                        Box::new(IntoInput::new(inner, wrap)) as Box<dyn Output<A>>
                    ))
                }),
            }),
        }
    }
}

/// What a node runs.
#[derive(Clone)]
pub(crate) enum NodeKind {
    Source(Arc<dyn ErasedSource>),
    Operator {
        in_type: Arc<dyn StreamType>,
        build: Arc<BuildFn>,
        /// Checks the operator's configuration (a sink's path) before the job starts.
        validate: Option<Arc<dyn Fn() -> Result<()> + Send + Sync>>,
    },
}

/// One operator of the logical graph.
#[derive(Clone)]
pub(crate) struct Node {
    pub(crate) name: String,
    pub(crate) uid: Option<String>,
    pub(crate) parallelism: Option<usize>,
    pub(crate) inputs: Vec<Edge>,
    pub(crate) out_type: Arc<dyn StreamType>,
    pub(crate) kind: NodeKind,
    pub(crate) start_new_chain: bool,
    /// The policy of a node that decodes input (a source, a parser), whose dead letters go to a
    /// default file when the job does not consume them.
    pub(crate) bad_records: Option<crate::bad_records::BadRecordPolicy>,
    /// Keeps keyed state (in the task's store when the state backend has one).
    pub(crate) keyed: bool,
    /// What no other node of the job may use too ([`Sink::exclusive_resource`]).
    ///
    /// [`Sink::exclusive_resource`]: crate::sink::Sink::exclusive_resource
    pub(crate) exclusive: Option<String>,
    /// The operator's settings that change its state or results (`key`, `window`, ...), for
    /// the job's fingerprint ([`JobFingerprint`]).
    pub(crate) settings: Vec<(String, String)>,
}

/// Checks the graph and its configuration (before a run starts).
pub(crate) fn validate(nodes: &[Node], config: &EnvConfig) -> Result<()> {
    config.validate()?;
    if nodes.is_empty() {
        return Err(Error::Graph(
            "the job has no operators; add a source and a sink".into(),
        ));
    }
    for node in nodes {
        match &node.kind {
            NodeKind::Source(source) => source.validate()?,
            NodeKind::Operator {
                validate: Some(validate),
                ..
            } => validate()?,
            NodeKind::Operator { .. } => {}
        }
    }
    let mut exclusive: std::collections::BTreeMap<&str, &str> = Default::default();
    for node in nodes {
        let Some(resource) = &node.exclusive else {
            continue;
        };
        if let Some(other) = exclusive.insert(resource, &node.name) {
            return Err(Error::Graph(format!(
                "`{other}` and `{}` both use {resource}: give each its own",
                node.name
            )));
        }
    }
    layout(nodes, config).map(drop)
}

/// The number of tasks a run of the job has.
pub(crate) fn task_count(nodes: &[Node], config: &EnvConfig) -> Result<usize> {
    let layout = layout(nodes, config)?;
    Ok(layout
        .chains
        .iter()
        .map(|(head, _)| layout.parallelism[*head])
        .sum())
}

/// The job graph as the runtime's [`Planner`](crate::runtime::Planner): the nodes the API
/// declared, planned again at every run.
pub(crate) struct GraphPlanner {
    nodes: Vec<Node>,
}

impl GraphPlanner {
    pub(crate) fn new(nodes: Vec<Node>) -> Self {
        GraphPlanner { nodes }
    }
}

impl crate::runtime::Planner for GraphPlanner {
    fn validate(&self, config: &EnvConfig) -> Result<()> {
        validate(&self.nodes, config)
    }

    fn task_count(&self, config: &EnvConfig) -> Result<usize> {
        task_count(&self.nodes, config)
    }

    fn plan(
        &self,
        run: &crate::runtime::RunContext<'_>,
    ) -> Result<(Vec<crate::runtime::TaskSpec>, JobPlan)> {
        plan(&self.nodes, run)
    }
}

//! The job graph: the logical graph the DataStream API builds, and the planner that turns it into
//! tasks.
//!
//! Planning resolves each operator's parallelism, chains every forward edge between operators of
//! equal parallelism (the consumer then runs in the producer's task and is called directly),
//! creates bounded channels for the other edges (forward, rebalance, hash by key group,
//! broadcast), and assembles one [`TaskDriver`] per chain and subtask. Record types are checked by
//! the typed API; here they travel as `Box<dyn Any>` and are unpacked where the type is known
//! again, through [`StreamType`].

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};
use serde::Serialize;

use crate::checkpoint::Finalizers;
use crate::checkpoint::RestoreState;
use crate::checkpoint::coordinator::CheckpointHub;
use crate::checkpoint::restore::RestoreAssignment;
use crate::config::{EnvConfig, check_parallelism};
use crate::error::{Error, Result};
use crate::keys::KeyGroupRange;
use crate::metrics::MetricsRegistry;
use crate::operators::{ErasedSideOutput, OperatorContext, SideOutputs, TypedSideOutput};
use crate::record::{Data, StreamElement};
use crate::runtime::{
    Discard, Fanout, InputTask, IntoInput, JobControl, KeyGroupFn, Output, RecordWriter,
    ShipStrategy, TaskContext, TaskDriver, TaskSpec, TaskStoreHandle,
};
use crate::source::DeadLetter;
use crate::source::task::{ErasedSource, SourceTaskSetup};
use crate::state::TaskStore;

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
    pub(crate) wrap: Arc<dyn Fn(AnyOutput) -> AnyOutput + Send + Sync>,
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
                let of_a: KeyGroupFn<A> = unpack(factory(max_parallelism));
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
                    let inner: Box<dyn Output<U>> = unpack(output);
                    Box::new(Box::new(IntoInput::new(inner, wrap)) as Box<dyn Output<A>>)
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
    pub(crate) bad_records: Option<crate::source::BadRecordPolicy>,
    /// Keeps keyed state (in the task's store when the state backend has one).
    pub(crate) keyed: bool,
}

/// Operations on a stream whose record type the graph does not know.
pub(crate) trait StreamType: Send + Sync {
    fn record_type(&self) -> TypeId;
    fn type_name(&self) -> &'static str;
    fn channel(&self, capacity: usize) -> (Box<dyn Any + Send>, Box<dyn Any + Send>);
    fn writer(
        &self,
        senders: Vec<Box<dyn Any + Send>>,
        ship: &Ship,
        config: &EnvConfig,
        ctx: TaskContext,
    ) -> AnyOutput;
    fn fanout(&self, outputs: Vec<AnyOutput>) -> AnyOutput;
    fn discard(&self) -> AnyOutput;
    fn side_output(&self, output: AnyOutput) -> Box<dyn ErasedSideOutput>;
    /// The task reading `receivers` (each with the input it belongs to) into `chain`.
    fn input_task(
        &self,
        receivers: Receivers,
        chain: AnyOutput,
        ctx: TaskContext,
    ) -> Box<dyn TaskDriver>;
}

/// The [`StreamType`] of records of type `T`.
pub(crate) struct TypeOf<T>(PhantomData<fn() -> T>);

impl<T: Data> TypeOf<T> {
    pub(crate) fn arc() -> Arc<dyn StreamType> {
        Arc::new(TypeOf::<T>(PhantomData))
    }
}

fn unpack<X: 'static>(any: Box<dyn Any + Send>) -> X {
    *any.downcast::<X>().unwrap_or_else(|_| {
        panic!(
            "job graph type mix-up: expected {}",
            std::any::type_name::<X>()
        )
    })
}

impl<T: Data> StreamType for TypeOf<T> {
    fn record_type(&self) -> TypeId {
        TypeId::of::<T>()
    }

    fn type_name(&self) -> &'static str {
        std::any::type_name::<T>()
    }

    fn channel(&self, capacity: usize) -> (Box<dyn Any + Send>, Box<dyn Any + Send>) {
        let (tx, rx) = crossbeam_channel::bounded::<StreamElement<T>>(capacity);
        (Box::new(tx), Box::new(rx))
    }

    fn writer(
        &self,
        senders: Vec<Box<dyn Any + Send>>,
        ship: &Ship,
        config: &EnvConfig,
        ctx: TaskContext,
    ) -> AnyOutput {
        let senders: Vec<Sender<StreamElement<T>>> = senders.into_iter().map(unpack).collect();
        let strategy = match ship {
            Ship::Forward => ShipStrategy::Forward,
            Ship::Rebalance => ShipStrategy::Rebalance,
            Ship::Broadcast => ShipStrategy::Broadcast,
            Ship::Hash(factory) => ShipStrategy::Hash(unpack(factory(config.max_parallelism))),
        };
        let writer = RecordWriter::new(
            senders,
            strategy,
            config.max_parallelism,
            config.buffer_size,
            ctx,
        );
        Box::new(Box::new(writer) as Box<dyn Output<T>>)
    }

    fn fanout(&self, outputs: Vec<AnyOutput>) -> AnyOutput {
        let outputs: Vec<Box<dyn Output<T>>> = outputs.into_iter().map(unpack).collect();
        Box::new(Box::new(Fanout::new(outputs)) as Box<dyn Output<T>>)
    }

    fn discard(&self) -> AnyOutput {
        Box::new(Box::new(Discard) as Box<dyn Output<T>>)
    }

    fn side_output(&self, output: AnyOutput) -> Box<dyn ErasedSideOutput> {
        Box::new(TypedSideOutput::<T>(unpack(output)))
    }

    fn input_task(
        &self,
        receivers: Receivers,
        chain: AnyOutput,
        ctx: TaskContext,
    ) -> Box<dyn TaskDriver> {
        let receivers: Vec<(usize, Receiver<StreamElement<T>>)> = receivers
            .into_iter()
            .map(|(input, rx)| (input, unpack(rx)))
            .collect();
        Box::new(InputTask::new(receivers, unpack(chain), ctx))
    }
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

/// Everything the planner derived from the logical graph.
struct Layout {
    parallelism: Vec<usize>,
    names: Vec<String>,
    /// Stable operator ids: the uid, or one derived from the operator's place and name.
    ids: Vec<String>,
    /// Whether a node runs in its input's task.
    chained: Vec<bool>,
    /// Consumers of each node: (consumer, index of the edge in the consumer's inputs).
    consumers: Vec<Vec<(NodeId, usize)>>,
    /// Chain heads with their members in order.
    chains: Vec<(NodeId, Vec<NodeId>)>,
}

fn layout(nodes: &[Node], config: &EnvConfig) -> Result<Layout> {
    let mut parallelism = Vec::with_capacity(nodes.len());
    let mut names = Vec::with_capacity(nodes.len());
    let mut seen: HashMap<String, usize> = HashMap::new();
    for node in nodes {
        let p = node.parallelism.unwrap_or(config.parallelism);
        check_parallelism(
            &format!("parallelism of `{}`", node.name),
            p,
            config.max_parallelism,
        )?;
        parallelism.push(p);
        let count = seen.entry(node.name.clone()).or_insert(0);
        *count += 1;
        names.push(if *count == 1 {
            node.name.clone()
        } else {
            format!("{} ({})", node.name, count)
        });
    }
    let mut ids = Vec::with_capacity(nodes.len());
    for (index, node) in nodes.iter().enumerate() {
        let id = node
            .uid
            .clone()
            .unwrap_or_else(|| format!("{index}:{}", node.name));
        if node.uid.is_some() && ids.contains(&id) {
            return Err(Error::Graph(format!(
                "two operators have the uid `{id}`: uids must be unique"
            )));
        }
        ids.push(id);
    }
    let mut consumers = vec![Vec::new(); nodes.len()];
    for (id, node) in nodes.iter().enumerate() {
        for (index, edge) in node.inputs.iter().enumerate() {
            if edge.from >= id {
                return Err(Error::Graph(format!(
                    "`{}` reads from an operator declared after it",
                    node.name
                )));
            }
            consumers[edge.from].push((id, index));
        }
    }
    let chained: Vec<bool> = nodes
        .iter()
        .enumerate()
        .map(|(id, node)| match node.inputs.as_slice() {
            [edge] => {
                edge.into.is_none()
                    && matches!(edge.ship, Ship::Forward)
                    && parallelism[edge.from] == parallelism[id]
                    && !node.start_new_chain
            }
            _ => false,
        })
        .collect();
    let mut chains = Vec::new();
    for head in (0..nodes.len()).filter(|&id| !chained[id]) {
        let mut members = Vec::new();
        let mut stack = vec![head];
        while let Some(id) = stack.pop() {
            members.push(id);
            for &(consumer, _) in consumers[id].iter().rev() {
                if chained[consumer] {
                    stack.push(consumer);
                }
            }
        }
        chains.push((head, members));
    }
    Ok(Layout {
        parallelism,
        names,
        ids,
        chained,
        consumers,
        chains,
    })
}

/// The receiving ends of a task's channels, each with the index of the edge (input) it belongs to.
type Receivers = Vec<(usize, Box<dyn Any + Send>)>;

/// Channels of every network edge, by producer and consumer subtask.
struct Channels {
    /// (consumer, edge index, producer subtask) -> senders in consumer-subtask order.
    senders: HashMap<(NodeId, usize, usize), Vec<Box<dyn Any + Send>>>,
    /// (consumer, consumer subtask) -> receivers over all its input edges, with the edge's index
    /// (the input of a multi-input operator it feeds).
    receivers: HashMap<(NodeId, usize), Receivers>,
}

fn create_channels(nodes: &[Node], layout: &Layout, config: &EnvConfig) -> Channels {
    let mut senders: HashMap<(NodeId, usize, usize), Vec<Box<dyn Any + Send>>> = HashMap::new();
    let mut receivers: HashMap<(NodeId, usize), Receivers> = HashMap::new();
    for (consumer, node) in nodes.iter().enumerate() {
        if layout.chained[consumer] {
            continue;
        }
        for (index, edge) in node.inputs.iter().enumerate() {
            let (producers, consumers) =
                (layout.parallelism[edge.from], layout.parallelism[consumer]);
            let pointwise = matches!(edge.ship, Ship::Forward) && producers == consumers;
            for p in 0..producers {
                for c in 0..consumers {
                    if pointwise && p != c {
                        continue;
                    }
                    let (tx, rx) = edge.ty.channel(config.channel_capacity);
                    senders.entry((consumer, index, p)).or_default().push(tx);
                    receivers
                        .entry((consumer, c))
                        .or_default()
                        .push((index, rx));
                }
            }
        }
    }
    Channels { senders, receivers }
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

/// Assembles the tasks of one subtask index of every chain.
struct Assembler<'a> {
    nodes: &'a [Node],
    layout: &'a Layout,
    config: &'a EnvConfig,
    registry: &'a MetricsRegistry,
    channels: Channels,
    run: &'a RunContext<'a>,
    tasks_built: usize,
    /// The store of the task being assembled.
    store: Option<TaskStoreHandle>,
}

impl Assembler<'_> {
    /// The effective ship strategy of an edge (a forward edge across different parallelism
    /// becomes a rebalance, as in Flink).
    fn ship(&self, consumer: NodeId, edge: &Edge) -> Ship {
        match edge.ship {
            Ship::Forward
                if self.layout.parallelism[edge.from] != self.layout.parallelism[consumer] =>
            {
                Ship::Rebalance
            }
            ref ship => ship.clone(),
        }
    }

    /// Everything that consumes `slot` of `node` in `subtask`, as one output of type `ty`.
    fn output(
        &mut self,
        node: NodeId,
        slot: &Slot,
        ty: &Arc<dyn StreamType>,
        subtask: usize,
        ctx: &TaskContext,
    ) -> Result<AnyOutput> {
        let mut outputs = Vec::new();
        for &(consumer, index) in &self.layout.consumers[node] {
            let edge = &self.nodes[consumer].inputs[index];
            if &edge.slot != slot {
                continue;
            }
            if edge.produced().record_type() != ty.record_type() {
                return Err(Error::Graph(format!(
                    "`{}` reads {} from `{}`, which emits {}",
                    self.layout.names[consumer],
                    edge.produced().type_name(),
                    self.layout.names[node],
                    ty.type_name()
                )));
            }
            if self.layout.chained[consumer] {
                outputs.push(self.operator_input(consumer, subtask, ctx)?);
            } else {
                let senders = self
                    .channels
                    .senders
                    .remove(&(consumer, index, subtask))
                    .unwrap_or_default();
                let ship = self.ship(consumer, edge);
                let writer = edge.ty.writer(senders, &ship, self.config, ctx.clone());
                outputs.push(match &edge.into {
                    Some(into) => (into.wrap)(writer),
                    None => writer,
                });
            }
        }
        Ok(match outputs.len() {
            0 => ty.discard(),
            1 => outputs.pop().expect("one output"),
            _ => ty.fanout(outputs),
        })
    }

    /// The side outputs of `node` that something consumes.
    fn side_outputs(
        &mut self,
        node: NodeId,
        subtask: usize,
        ctx: &TaskContext,
    ) -> Result<SideOutputs> {
        let mut tags: Vec<(String, Arc<dyn StreamType>)> = Vec::new();
        for &(consumer, index) in &self.layout.consumers[node] {
            let edge = &self.nodes[consumer].inputs[index];
            if let Slot::Side(tag) = &edge.slot
                && !tags.iter().any(|(t, _)| t == tag)
            {
                tags.push((tag.clone(), edge.produced().clone()));
            }
        }
        let mut side = SideOutputs::default();
        for (tag, ty) in tags {
            let output = self.output(node, &Slot::Side(tag.clone()), &ty, subtask, ctx)?;
            side.insert(tag, ty.side_output(output));
        }
        Ok(side)
    }

    fn restore_state(&self, node: NodeId, op: &OperatorContext) -> Result<Option<RestoreState>> {
        match self.run.restore {
            Some(restore) => restore.state_for(&op.id, op.subtask, op.parallelism, op.key_groups),
            None => Ok(None),
        }
        .map_err(|e| e.in_operator(&self.layout.names[node], op.subtask))
    }

    fn operator_context(&self, node: NodeId, subtask: usize) -> OperatorContext {
        let parallelism = self.layout.parallelism[node];
        let name = self.layout.names[node].clone();
        OperatorContext {
            metrics: self.registry.operator(&name, subtask),
            id: self.layout.ids[node].clone(),
            run_id: self.run.run_id.clone(),
            job_name: self.config.job_name.clone(),
            restored: self.run.restore.is_some(),
            finalizers: Some(self.run.finalizers.clone()),
            name,
            subtask,
            parallelism,
            max_parallelism: self.config.max_parallelism,
            key_groups: KeyGroupRange::for_subtask(
                subtask,
                parallelism,
                self.config.max_parallelism,
            ),
            batch_size: self.config.buffer_size,
            clock: self.config.clock.clone(),
            store: self.store.as_ref().map(|s| s.store.clone()),
        }
    }

    /// Opens the store of task `task` (of chain `head`, instance `subtask`) when the state backend
    /// has stores and the chain keeps keyed state, filling it from the checkpoint restored.
    fn open_store(
        &self,
        head: NodeId,
        subtask: usize,
        task: usize,
    ) -> Result<Option<TaskStoreHandle>> {
        let members = self
            .layout
            .chains
            .iter()
            .find(|(h, _)| *h == head)
            .map(|(_, m)| m.as_slice())
            .unwrap_or_default();
        if !members.iter().any(|&m| self.nodes[m].keyed) {
            return Ok(None);
        }
        let config = self.config;
        let key_groups = KeyGroupRange::for_subtask(
            subtask,
            self.layout.parallelism[head],
            config.max_parallelism,
        );
        let id = format!("{}-task-{task}", self.run.run_id);
        let spec = TaskStore {
            job: config.job_name.clone(),
            task,
            run_id: self.run.run_id.clone(),
            key_groups,
            local_dir: config.local_state_dir.join(&config.job_name).join(&id),
        };
        let Some(store) = config.state_backend.open_store(&spec)? else {
            return Ok(None);
        };
        if let Some(restore) = self.run.restore {
            restore
                .restore_store(store.as_ref(), key_groups, &spec.local_dir)
                .map_err(|e| e.in_operator(&self.layout.names[head], subtask))?;
        }
        Ok(Some(TaskStoreHandle {
            store,
            id,
            key_groups,
            local_dir: spec.local_dir,
        }))
    }

    /// The operator `node` of `subtask` with everything after it.
    fn operator_input(
        &mut self,
        node: NodeId,
        subtask: usize,
        ctx: &TaskContext,
    ) -> Result<AnyOutput> {
        let NodeKind::Operator { build, .. } = &self.nodes[node].kind else {
            return Err(Error::Graph(format!(
                "source `{}` cannot consume a stream",
                self.layout.names[node]
            )));
        };
        let build = build.clone();
        let out_type = self.nodes[node].out_type.clone();
        // Created before the operators after it, so metrics list operators in topological order.
        let op = self.operator_context(node, subtask);
        let restore = self.restore_state(node, &op)?;
        let output = self.output(node, &Slot::Main, &out_type, subtask, ctx)?;
        let mut side = self.side_outputs(node, subtask, ctx)?;
        side.count_unconsumed_in(op.metrics.clone());
        build(op, output, side, restore)
    }

    fn task(&mut self, head: NodeId, chain_name: &str, subtask: usize) -> Result<TaskSpec> {
        let metrics = self.registry.task(chain_name, subtask);
        self.store = self.open_store(head, subtask, self.tasks_built)?;
        let ctx = TaskContext {
            store: self.store.clone(),
            control: self.run.control.clone(),
            metrics: metrics.clone(),
            buffer_timeout: self.config.buffer_timeout,
            task_index: self.tasks_built,
            checkpoints: self.run.checkpoints.clone(),
        };
        self.tasks_built += 1;
        let node = &self.nodes[head];
        let driver = match &node.kind {
            NodeKind::Source(source) => {
                let source = source.clone();
                let out_type = node.out_type.clone();
                let op = self.operator_context(head, subtask);
                let restore = self.restore_state(head, &op)?;
                let output = self.output(head, &Slot::Main, &out_type, subtask, &ctx)?;
                let dead_letter_type = TypeOf::<DeadLetter>::arc();
                let slot = Slot::Side(crate::source::DEAD_LETTER_TAG.to_string());
                let dead_letter =
                    unpack(self.output(head, &slot, &dead_letter_type, subtask, &ctx)?);
                source.task(SourceTaskSetup {
                    operator_id: op.id,
                    restore,
                    name: op.name,
                    subtask,
                    parallelism: op.parallelism,
                    output,
                    dead_letter,
                    metrics: op.metrics,
                    ctx: ctx.clone(),
                    batch_size: self.config.buffer_size,
                    clock: self.config.clock.clone(),
                    watermark_interval: self.config.watermark_interval,
                    watermark_after_every_batch: self.config.watermark_after_every_batch,
                    latency_interval: self.config.latency_interval,
                })?
            }
            NodeKind::Operator { in_type, .. } => {
                let in_type = in_type.clone();
                let chain = self.operator_input(head, subtask, &ctx)?;
                let receivers = self
                    .channels
                    .receivers
                    .remove(&(head, subtask))
                    .unwrap_or_default();
                in_type.input_task(receivers, chain, ctx)
            }
        };
        Ok(TaskSpec {
            name: chain_name.to_string(),
            head: self.layout.names[head].clone(),
            subtask,
            driver,
            metrics,
        })
    }
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

/// Builds every task of one run of the job.
pub(crate) fn plan(nodes: &[Node], run: &RunContext<'_>) -> Result<(Vec<TaskSpec>, JobPlan)> {
    let config = run.config;
    let layout = layout(nodes, config)?;
    let described = describe(nodes, &layout);
    let channels = create_channels(nodes, &layout, config);
    let mut assembler = Assembler {
        nodes,
        layout: &layout,
        config,
        registry: run.registry,
        channels,
        run,
        tasks_built: 0,
        store: None,
    };
    let mut tasks = Vec::new();
    for (vertex, (head, _)) in layout.chains.iter().enumerate() {
        for subtask in 0..layout.parallelism[*head] {
            tasks.push(assembler.task(*head, &described.vertices[vertex].name, subtask)?);
        }
    }
    if let Some(restore) = run.restore {
        let unused = restore.unused();
        if !unused.is_empty() && !config.checkpoints.allow_non_restored_state {
            return Err(Error::Checkpoint(format!(
                "{} holds state of operators this job does not have: {}; give operators the same `uid` \
                 as before, or allow non-restored state to drop it",
                restore.description,
                unused.join(", ")
            )));
        }
    }
    Ok((tasks, described))
}

/// The user-facing description of the plan.
pub(crate) fn describe_nodes(nodes: &[Node], config: &EnvConfig) -> Result<JobPlan> {
    Ok(describe(nodes, &layout(nodes, config)?))
}

fn describe(nodes: &[Node], layout: &Layout) -> JobPlan {
    let vertex_of: HashMap<NodeId, usize> = layout
        .chains
        .iter()
        .enumerate()
        .flat_map(|(vertex, (_, members))| members.iter().map(move |&m| (m, vertex)))
        .collect();
    let vertices = layout
        .chains
        .iter()
        .map(|(head, members)| {
            let operators: Vec<String> = members.iter().map(|&m| layout.names[m].clone()).collect();
            PlanVertex {
                name: operators.join(" -> "),
                uids: members.iter().map(|&m| nodes[m].uid.clone()).collect(),
                operators,
                parallelism: layout.parallelism[*head],
            }
        })
        .collect();
    let mut edges = Vec::new();
    for (consumer, node) in nodes.iter().enumerate() {
        if layout.chained[consumer] {
            continue;
        }
        for edge in &node.inputs {
            let ship = match edge.ship {
                Ship::Forward if layout.parallelism[edge.from] != layout.parallelism[consumer] => {
                    "REBALANCE"
                }
                ref ship => ship.label(),
            };
            edges.push(PlanEdge {
                from: vertex_of[&edge.from],
                to: vertex_of[&consumer],
                ship: ship.to_string(),
                side_output: match &edge.slot {
                    Slot::Main => None,
                    Slot::Side(tag) => Some(tag.clone()),
                },
            });
        }
    }
    JobPlan { vertices, edges }
}

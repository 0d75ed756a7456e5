//! Task assembly: builds the tasks of one run of the job, with their stores and restored state.
//!
//! For each chain and each of its subtasks, the [`Assembler`] opens the task's key-value store
//! (when the state backend has stores and the chain keeps keyed state; filled from the restored
//! checkpoint), then builds the chain from its head: each operator gets its context (id,
//! subtask, key groups, metrics), its share of the restored state, and its outputs, which are
//! built first: the operators chained behind it, or the network writers of the channels to the
//! next tasks (several consumers: a fan-out; none: a discard). The head becomes a source task,
//! or an input task whose gate reads the chain's channels.

use std::sync::Arc;

use crate::bad_records::DeadLetter;
use crate::checkpoint::RestoreState;
use crate::config::EnvConfig;
use crate::error::{Error, Result};
use crate::graph::channels::{Channels, create_channels};
use crate::graph::layout::{Layout, layout};
use crate::graph::plan::describe;
use crate::graph::types::{TypeOf, downcast};
use crate::graph::{AnyOutput, Edge, Node, NodeId, NodeKind, Ship, Slot, StreamType};
use crate::keys::KeyGroupRange;
use crate::metrics::MetricsRegistry;
use crate::operators::{OperatorContext, SideOutputs};
use crate::runtime::source_task::SourceTaskSetup;
use crate::runtime::{InFlightSetup, JobPlan, RunContext, TaskContext, TaskSpec, TaskStoreHandle};
use crate::state::TaskStore;

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
                let in_flight = self.in_flight(
                    InFlightSetup::output_id(
                        &self.layout.ids[node],
                        &self.layout.ids[consumer],
                        index,
                    ),
                    format!(
                        "{} -> {} (in-flight output)",
                        self.layout.names[node], self.layout.names[consumer]
                    ),
                    node,
                    subtask,
                )?;
                let writer = edge
                    .ty
                    .writer(senders, &ship, self.config, ctx.clone(), in_flight)?;
                outputs.push(match &edge.into {
                    Some(into) => (into.wrap)(writer)?,
                    None => writer,
                });
            }
        }
        Ok(match outputs.len() {
            0 => ty.discard(),
            1 => outputs.pop().expect("one output"),
            _ => ty.fanout(outputs)?,
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
            side.insert(tag, ty.side_output(output)?);
        }
        Ok(side)
    }

    /// Where the in-flight data `id` of `node`'s subtask `subtask` goes, with what the restored
    /// checkpoint has of it.
    fn in_flight(
        &self,
        id: String,
        name: String,
        node: NodeId,
        subtask: usize,
    ) -> Result<InFlightSetup> {
        let parallelism = self.layout.parallelism[node];
        let restored = match self.run.restore {
            Some(restore) => restore.in_flight_for(&id, subtask, parallelism)?,
            None => None,
        };
        let checkpoints = &self.config.checkpoints;
        Ok(InFlightSetup {
            id,
            name,
            subtask,
            parallelism,
            restored,
            unaligned: checkpoints.unaligned && checkpoints.enabled(),
        })
    }

    fn restore_state(&self, node: NodeId, op: &OperatorContext) -> Result<Option<RestoreState>> {
        match self.run.restore {
            Some(restore) => restore.state_for(&op.id, op.subtask, op.parallelism, op.key_groups),
            None => Ok(None),
        }
        .map_err(|e| e.in_operator(&self.layout.names[node], op.subtask))
    }

    #[allow(deprecated)] // sets `batch_size`, the former name of `buffer_size`
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
            buffer_size: self.config.buffer_size,
            batch_size: self.config.buffer_size,
            clock: self.config.clock.clone(),
            store: self.store.as_ref().map(|s| s.store.clone()),
            keyed: self.nodes[node].keyed,
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
            local_dir: if config.state_backend.keeps_local_files() {
                crate::runtime::process_dir(&config.local_state_dir)?
            } else {
                config.local_state_dir.clone()
            }
            .join(&config.job_name)
            .join(&id),
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
                let slot = Slot::Side(crate::bad_records::DEAD_LETTER_TAG.to_string());
                let dead_letter =
                    downcast(self.output(head, &slot, &dead_letter_type, subtask, &ctx)?)?;
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
                let in_flight = self.in_flight(
                    InFlightSetup::input_id(&self.layout.ids[head]),
                    format!("{} (in-flight input)", self.layout.names[head]),
                    head,
                    subtask,
                )?;
                in_type.input_task(receivers, chain, ctx, in_flight)?
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
                 as before, or allow non-restored state to drop it (`riffle .. \
                 --allow-non-restored-state`, `CheckpointConfig::allow_non_restored_state`)",
                restore.description,
                unused.join(", ")
            )));
        }
    }
    Ok((tasks, described))
}

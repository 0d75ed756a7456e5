//! The plan as users see it: chains of operators (vertices) and the network edges between them,
//! for `StreamEnv::plan`, the CLI's `--plan` and the web UI.

use std::collections::HashMap;

use serde::Serialize;

use crate::config::EnvConfig;
use crate::error::Result;
use crate::graph::layout::{Layout, layout};
use crate::graph::{Node, NodeId, Ship, Slot};

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

/// The user-facing description of the plan.
pub(crate) fn describe_nodes(nodes: &[Node], config: &EnvConfig) -> Result<JobPlan> {
    Ok(describe(nodes, &layout(nodes, config)?))
}

pub(super) fn describe(nodes: &[Node], layout: &Layout) -> JobPlan {
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

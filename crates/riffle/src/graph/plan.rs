//! The plan as users see it: chains of operators (vertices) and the network edges between them,
//! for `StreamEnv::plan`, the CLI's `--plan` and the web UI.

use std::collections::HashMap;

use crate::config::EnvConfig;
use crate::error::Result;
use crate::graph::layout::{Layout, layout};
use crate::graph::{Node, NodeId, Ship, Slot};
use crate::runtime::{JobPlan, PlanEdge, PlanVertex};

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

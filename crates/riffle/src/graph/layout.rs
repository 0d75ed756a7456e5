//! Layout and chaining: the parallelism of every operator, its stable id, and which operators
//! share a task.
//!
//! An operator is chained to its input (runs in its task, called directly, no channel) when it
//! has exactly one input, that edge is a forward edge from an operator of equal parallelism, the
//! operator did not ask for a new chain, and the edge does not feed one input of a multi-input
//! operator. Every other operator starts a chain; a chain is its head and every operator chained
//! behind it, in the order the tasks call them.

use std::collections::HashMap;

use crate::config::{EnvConfig, check_parallelism};
use crate::error::{Error, Result};
use crate::graph::{Node, NodeId, Ship};

/// Everything the planner derived from the logical graph.
pub(super) struct Layout {
    pub(super) parallelism: Vec<usize>,
    pub(super) names: Vec<String>,
    /// Stable operator ids: the uid, or one derived from the operator's place and name.
    pub(super) ids: Vec<String>,
    /// Whether a node runs in its input's task.
    pub(super) chained: Vec<bool>,
    /// Consumers of each node: (consumer, index of the edge in the consumer's inputs).
    pub(super) consumers: Vec<Vec<(NodeId, usize)>>,
    /// Chain heads with their members in order.
    pub(super) chains: Vec<(NodeId, Vec<NodeId>)>,
}

pub(super) fn layout(nodes: &[Node], config: &EnvConfig) -> Result<Layout> {
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

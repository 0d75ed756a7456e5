//! Channels: the bounded queues of every edge that is not chained.
//!
//! An edge from `p` producer subtasks to `c` consumer subtasks gets `p * c` channels (a forward
//! edge between equal parallelism: `p`, subtask `i` to subtask `i`). Each channel has one
//! sender, in the producer's network writer, and one receiver, in the consumer's input gate.

use std::any::Any;
use std::collections::HashMap;

use crate::config::EnvConfig;
use crate::graph::layout::Layout;
use crate::graph::types::Receivers;
use crate::graph::{Node, NodeId, Ship};

/// Channels of every network edge, by producer and consumer subtask.
pub(super) struct Channels {
    /// (consumer, edge index, producer subtask) -> senders in consumer-subtask order.
    pub(super) senders: HashMap<(NodeId, usize, usize), Vec<Box<dyn Any + Send>>>,
    /// (consumer, consumer subtask) -> receivers over all its input edges, with the edge's index
    /// (the input of a multi-input operator it feeds).
    pub(super) receivers: HashMap<(NodeId, usize), Receivers>,
}

pub(super) fn create_channels(nodes: &[Node], layout: &Layout, config: &EnvConfig) -> Channels {
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

//! The job being declared: the logical graph the API adds nodes to (shared by a [`StreamEnv`]
//! and every stream it created), and the constructors of operator and sink nodes. Below the
//! stream types, which all build on it.
//!
//! [`StreamEnv`]: crate::StreamEnv

use std::cell::RefCell;
use std::sync::Arc;

use crate::config::EnvConfig;
use crate::error::Result;
use crate::graph::{AnyOutput, Edge, Node, NodeId, NodeKind, TypeOf};
use crate::operators::{BuildOperator, InOf, OutOf, build_operator};
use crate::record::Data;
use crate::runtime::{ChainLink, Output};
use crate::sink::{Sink, SinkOperator};

/// The shared state behind a [`StreamEnv`] and the streams it created.
pub(crate) struct EnvInner {
    pub(crate) config: RefCell<EnvConfig>,
    pub(crate) nodes: RefCell<Vec<Node>>,
    /// Misuses of the API found while declaring the job; reported by `execute`.
    pub(crate) errors: RefCell<Vec<String>>,
}

impl EnvInner {
    pub(crate) fn add_node(&self, node: Node) -> NodeId {
        let mut nodes = self.nodes.borrow_mut();
        nodes.push(node);
        nodes.len() - 1
    }

    pub(crate) fn defer_error(&self, message: String) {
        self.errors.borrow_mut().push(message);
    }
}

/// A node that runs the operator that `factory`'s builder builds per subtask from its context.
pub(crate) fn operator_node<B: BuildOperator>(
    name: impl Into<String>,
    inputs: Vec<Edge>,
    factory: impl Fn() -> Result<B> + Send + Sync + 'static,
) -> Node {
    Node {
        name: name.into(),
        uid: None,
        parallelism: None,
        inputs,
        out_type: TypeOf::<OutOf<B>>::arc(),
        kind: NodeKind::Operator {
            in_type: TypeOf::<InOf<B>>::arc(),
            build: Arc::new(move |ctx, output: AnyOutput, side, restore| {
                let output = *output
                    .downcast::<Box<dyn Output<OutOf<B>>>>()
                    .map_err(|_| {
                        crate::Error::Graph(format!("`{}`: output of another type", ctx.name))
                    })?;
                let op = build_operator(&ctx, || factory()?.build(&ctx))?;
                let link: Box<dyn Output<InOf<B>>> =
                    Box::new(ChainLink::new(op, ctx, output, side).with_restore(restore));
                Ok(Box::new(link))
            }),
            validate: None,
        },
        start_new_chain: false,
        bad_records: None,
        keyed: false,
        exclusive: None,
        settings: Vec::new(),
    }
}

/// A node that writes its input to `sink`.
pub(crate) fn sink_node<T: Data, S: Sink<T>>(name: String, sink: S) -> Node {
    let sink = Arc::new(sink);
    let for_validation = sink.clone();
    let exclusive = sink.exclusive_resource();
    let mut node = Node {
        name,
        uid: None,
        parallelism: None,
        inputs: Vec::new(),
        out_type: TypeOf::<()>::arc(),
        kind: NodeKind::Operator {
            in_type: TypeOf::<T>::arc(),
            build: Arc::new(|_, _, _, _| unreachable!("replaced below")),
            validate: Some(Arc::new(move || for_validation.validate())),
        },
        start_new_chain: false,
        bad_records: None,
        keyed: false,
        exclusive,
        settings: Vec::new(),
    };
    if let NodeKind::Operator { build, .. } = &mut node.kind {
        *build = Arc::new(move |ctx, _output, side, restore| {
            let writer = sink
                .writer(&ctx)
                .map_err(|e| e.in_operator(&ctx.name, ctx.subtask))?;
            let operator = build_operator(&ctx, || SinkOperator::new(writer).build(&ctx))?;
            let link: Box<dyn Output<T>> = Box::new(
                ChainLink::new(operator, ctx, Box::new(crate::runtime::Discard), side)
                    .with_restore(restore),
            );
            Ok(Box::new(link))
        });
    }
    node
}

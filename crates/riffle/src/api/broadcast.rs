//! The broadcast state pattern in the API (Flink's `stream.broadcast(descriptor)` and
//! `events.connect(broadcastStream)`): [`BroadcastStream`] is a stream sent to every subtask of
//! the operator it is connected to, with the broadcast state it fills declared;
//! [`BroadcastConnectedStream`] and [`KeyedBroadcastConnectedStream`] run a
//! [`BroadcastProcessFunction`] or [`KeyedBroadcastProcessFunction`] over it and another stream.
//!
//! (`DataStream::broadcast()` without a descriptor is the partitioning alone: every record to
//! every subtask of the next operator, no state.)

use std::hash::Hash;

use crate::api::declared::operator_node;
use crate::api::keyed::KeyedStream;
use crate::api::stream::DataStream;
use crate::graph::{Edge, Node, Ship, Slot};
use crate::operators::{
    BroadcastProcess, BroadcastProcessFunction, BroadcastStateDeclarations, KeyedBroadcastProcess,
    KeyedBroadcastProcessFunction,
};
use crate::record::{Data, Either};
use crate::state::MapStateDescriptor;

/// A stream sent whole to every subtask of the operator it is connected to, with the broadcast
/// state that operator keeps (made by [`DataStream::broadcast_state`]).
pub struct BroadcastStream<B> {
    stream: DataStream<B>,
    declarations: BroadcastStateDeclarations,
}

impl<B> Clone for BroadcastStream<B> {
    fn clone(&self) -> Self {
        BroadcastStream {
            stream: self.stream.clone(),
            declarations: self.declarations.clone(),
        }
    }
}

impl<B: Data> BroadcastStream<B> {
    /// Declares one more broadcast state (another map, by its own descriptor).
    pub fn and_state<K: Data + Hash + Eq, V: Data>(
        mut self,
        descriptor: &MapStateDescriptor<K, V>,
    ) -> Self {
        self.declarations.declare(descriptor);
        self
    }

    /// The names of the broadcast states declared.
    pub fn state_names(&self) -> Vec<&'static str> {
        self.declarations.names()
    }
}

/// The edges of an operator over a stream and a broadcast stream: `Either::Left` for the first,
/// `Either::Right` for the broadcast one (shipped to every subtask).
fn edges<A: Data, B: Data>(first: &DataStream<A>, broadcast: &BroadcastStream<B>) -> Vec<Edge> {
    vec![
        first
            .edge()
            .into_input(Either::<A, B>::Left, Either::<A, B>::left),
        broadcast
            .stream
            .edge()
            .into_input(Either::<A, B>::Right, Either::<A, B>::right),
    ]
}

impl<T: Data> DataStream<T> {
    /// This stream as a broadcast stream with the broadcast state `descriptor` (Flink's
    /// `broadcast(MapStateDescriptor)`): every subtask of the operator it is connected to (with
    /// [`connect_broadcast`](DataStream::connect_broadcast)) gets every record and keeps the state
    /// in a map. Declare more maps with [`BroadcastStream::and_state`].
    pub fn broadcast_state<K: Data + Hash + Eq, V: Data>(
        &self,
        descriptor: &MapStateDescriptor<K, V>,
    ) -> BroadcastStream<T> {
        let mut declarations = BroadcastStateDeclarations::default();
        declarations.declare(descriptor);
        BroadcastStream {
            stream: self.broadcast(),
            declarations,
        }
    }

    /// Connects this stream with a broadcast stream (Flink's `connect(BroadcastStream)`); run
    /// a [`BroadcastProcessFunction`] on both with
    /// [`process`](BroadcastConnectedStream::process).
    pub fn connect_broadcast<B: Data>(
        &self,
        broadcast: &BroadcastStream<B>,
    ) -> BroadcastConnectedStream<T, B> {
        BroadcastConnectedStream {
            first: self.clone(),
            broadcast: broadcast.clone(),
        }
    }
}

impl<K: Data + Hash + Eq, T: Data> KeyedStream<K, T> {
    /// Connects this keyed stream with a broadcast stream; run a
    /// [`KeyedBroadcastProcessFunction`] on both with
    /// [`process`](KeyedBroadcastConnectedStream::process).
    pub fn connect_broadcast<B: Data>(
        &self,
        broadcast: &BroadcastStream<B>,
    ) -> KeyedBroadcastConnectedStream<K, T, B> {
        KeyedBroadcastConnectedStream {
            first: self.clone(),
            broadcast: broadcast.clone(),
        }
    }
}

/// A stream connected with a broadcast stream.
pub struct BroadcastConnectedStream<A, B> {
    first: DataStream<A>,
    broadcast: BroadcastStream<B>,
}

impl<A: Data, B: Data> BroadcastConnectedStream<A, B> {
    /// The trait form is now [`process_function`](Self::process_function), as on every other
    /// stream; `process` will take closures here too.
    #[deprecated(
        since = "0.2.0",
        note = "renamed `process_function`; `process` takes closures on every other stream"
    )]
    pub fn process<Out, P>(&self, function: P) -> DataStream<Out>
    where
        Out: Data,
        P: BroadcastProcessFunction<A, B, Out> + Clone + Sync,
    {
        self.process_function(function)
    }

    /// Runs a [`BroadcastProcessFunction`]; each subtask gets a clone of `function` and its own
    /// copy of the broadcast state.
    pub fn process_function<Out, P>(&self, function: P) -> DataStream<Out>
    where
        Out: Data,
        P: BroadcastProcessFunction<A, B, Out> + Clone + Sync,
    {
        let declarations = self.broadcast.declarations.clone();
        let node = operator_node(
            "BroadcastProcess",
            edges(&self.first, &self.broadcast),
            move || {
                Ok(BroadcastProcess::new(
                    function.clone(),
                    declarations.clone(),
                ))
            },
        );
        let id = self.first.env.add_node(node);
        DataStream::new(self.first.env.clone(), id, Slot::Main, Ship::Forward)
    }
}

/// A keyed stream connected with a broadcast stream.
pub struct KeyedBroadcastConnectedStream<K, A, B> {
    first: KeyedStream<K, A>,
    broadcast: BroadcastStream<B>,
}

impl<K: Data + Hash + Eq, A: Data, B: Data> KeyedBroadcastConnectedStream<K, A, B> {
    /// The trait form is now [`process_function`](Self::process_function), as on every other
    /// stream; `process` will take closures here too.
    #[deprecated(
        since = "0.2.0",
        note = "renamed `process_function`; `process` takes closures on every other stream"
    )]
    pub fn process<Out, P>(&self, function: P) -> DataStream<Out>
    where
        Out: Data,
        P: KeyedBroadcastProcessFunction<K, A, B, Out> + Clone + Sync,
    {
        self.process_function(function)
    }

    /// Runs a [`KeyedBroadcastProcessFunction`]: keyed state and timers in the job's state
    /// backend, broadcast state as operator state; each subtask gets a clone of `function`.
    pub fn process_function<Out, P>(&self, function: P) -> DataStream<Out>
    where
        Out: Data,
        P: KeyedBroadcastProcessFunction<K, A, B, Out> + Clone + Sync,
    {
        let declarations = self.broadcast.declarations.clone();
        let key = self.first.key_selector();
        let input = self.first.input();
        let mut node: Node = operator_node(
            "KeyedBroadcastProcess",
            edges(input, &self.broadcast),
            move || {
                Ok(KeyedBroadcastProcess::new(
                    key.clone(),
                    function.clone(),
                    declarations.clone(),
                ))
            },
        );
        node.keyed = true;
        let id = input.env.add_node(node);
        DataStream::new(input.env.clone(), id, Slot::Main, Ship::Forward)
    }
}

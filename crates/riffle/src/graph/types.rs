//! Type erasure: the planner handles streams whose record type it does not know.
//!
//! The typed API knows that a `map` from `A` to `B` reads `A` and emits `B`; the planner only
//! sees nodes and edges. Each node and edge carries a [`StreamType`] (a [`TypeOf<T>`] behind a
//! trait object) that creates the typed pieces of its stream as `Box<dyn Any>`: the channels,
//! the network writer, the fan-out to several consumers, the input task. Where one of these
//! boxes is opened again, [`downcast`] checks its type: a mix-up (a bug of the planner) is an
//! [`Error::Graph`] naming the expected type, never a panic.

use std::any::{Any, TypeId};
use std::marker::PhantomData;
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

use crate::config::EnvConfig;
use crate::error::{Error, Result};
use crate::graph::{AnyOutput, Ship};
use crate::operators::{ErasedSideOutput, TypedSideOutput};
use crate::record::{Data, StreamElement};
use crate::runtime::{
    Discard, Fanout, InFlightSetup, InputTask, Output, RecordWriter, ShipStrategy, TaskContext,
    TaskDriver,
};

/// The producer's end of a channel: its sender, and a receiver to take back what is queued.
type ProducerEnd<T> = (Sender<StreamElement<T>>, Receiver<StreamElement<T>>);

/// The receiving ends of a task's channels, each with the index of the edge (input) it belongs to.
pub(crate) type Receivers = Vec<(usize, Box<dyn Any + Send>)>;

/// Operations on a stream whose record type the graph does not know.
///
/// Every `Box<dyn Any + Send>` it takes must hold the piece of the same record type that it
/// (or its `channel`) created; otherwise the call fails with an [`Error::Graph`].
pub(crate) trait StreamType: Send + Sync {
    fn record_type(&self) -> TypeId;
    fn type_name(&self) -> &'static str;
    /// A bounded channel: (the producer's end: a sender with a receiver of the same channel,
    /// for unaligned barriers to take back what is queued; the consumer's receiver).
    fn channel(&self, capacity: usize) -> (Box<dyn Any + Send>, Box<dyn Any + Send>);
    /// The network writer over `senders` (producer's ends of [`StreamType::channel`], one per
    /// consumer subtask it may send to), its in-flight output set up by `in_flight`.
    fn writer(
        &self,
        senders: Vec<Box<dyn Any + Send>>,
        ship: &Ship,
        config: &EnvConfig,
        ctx: TaskContext,
        in_flight: InFlightSetup,
    ) -> Result<AnyOutput>;
    /// One output that hands every record to each of `outputs`.
    fn fanout(&self, outputs: Vec<AnyOutput>) -> Result<AnyOutput>;
    /// An output that drops everything (a stream nobody consumes).
    fn discard(&self) -> AnyOutput;
    /// `output` as a side output an operator can emit to by tag.
    fn side_output(&self, output: AnyOutput) -> Result<Box<dyn ErasedSideOutput>>;
    /// The task reading `receivers` (each with the input it belongs to) into `chain`, its
    /// in-flight input set up by `in_flight`.
    fn input_task(
        &self,
        receivers: Receivers,
        chain: AnyOutput,
        ctx: TaskContext,
        in_flight: InFlightSetup,
    ) -> Result<Box<dyn TaskDriver>>;
}

/// The [`StreamType`] of records of type `T`.
pub(crate) struct TypeOf<T>(PhantomData<fn() -> T>);

impl<T: Data> TypeOf<T> {
    pub(crate) fn arc() -> Arc<dyn StreamType> {
        Arc::new(TypeOf::<T>(PhantomData))
    }
}

/// Opens a box the planner made: a box of another type is a planner bug, reported as an error
/// that names the type expected.
pub(crate) fn downcast<X: 'static>(any: Box<dyn Any + Send>) -> Result<X> {
    any.downcast::<X>().map(|x| *x).map_err(|_| {
        Error::Graph(format!(
            "job graph type mix-up: expected {}",
            std::any::type_name::<X>()
        ))
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
        (Box::new((tx, rx.clone())), Box::new(rx))
    }

    fn writer(
        &self,
        senders: Vec<Box<dyn Any + Send>>,
        ship: &Ship,
        config: &EnvConfig,
        ctx: TaskContext,
        in_flight: InFlightSetup,
    ) -> Result<AnyOutput> {
        let ends: Vec<ProducerEnd<T>> = senders.into_iter().map(downcast).collect::<Result<_>>()?;
        let (senders, receivers): (Vec<_>, Vec<_>) = ends.into_iter().unzip();
        let strategy = match ship {
            Ship::Forward => ShipStrategy::Forward,
            Ship::Rebalance => ShipStrategy::Rebalance,
            Ship::Broadcast => ShipStrategy::Broadcast,
            Ship::Hash(factory) => ShipStrategy::Hash(downcast(factory(config.max_parallelism))?),
        };
        let writer = RecordWriter::new(
            senders,
            strategy,
            config.max_parallelism,
            config.buffer_size,
            ctx,
        )
        .with_in_flight(in_flight, receivers)?;
        Ok(Box::new(Box::new(writer) as Box<dyn Output<T>>))
    }

    fn fanout(&self, outputs: Vec<AnyOutput>) -> Result<AnyOutput> {
        let outputs: Vec<Box<dyn Output<T>>> =
            outputs.into_iter().map(downcast).collect::<Result<_>>()?;
        Ok(Box::new(
            Box::new(Fanout::new(outputs)) as Box<dyn Output<T>>
        ))
    }

    fn discard(&self) -> AnyOutput {
        Box::new(Box::new(Discard) as Box<dyn Output<T>>)
    }

    fn side_output(&self, output: AnyOutput) -> Result<Box<dyn ErasedSideOutput>> {
        Ok(Box::new(TypedSideOutput::<T>(downcast(output)?)))
    }

    fn input_task(
        &self,
        receivers: Receivers,
        chain: AnyOutput,
        ctx: TaskContext,
        in_flight: InFlightSetup,
    ) -> Result<Box<dyn TaskDriver>> {
        let receivers: Vec<(usize, Receiver<StreamElement<T>>)> = receivers
            .into_iter()
            .map(|(input, rx)| Ok((input, downcast(rx)?)))
            .collect::<Result<_>>()?;
        Ok(Box::new(InputTask::new(
            receivers,
            downcast(chain)?,
            ctx,
            in_flight,
        )?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_type_mix_up_is_an_error_naming_the_type_expected() {
        let ty = TypeOf::<u64>::arc();
        let (tx, _rx) = TypeOf::<String>::arc().channel(1);
        let err = ty
            .writer(
                vec![tx],
                &Ship::Forward,
                &EnvConfig::default(),
                TaskContext::detached("t"),
                InFlightSetup::detached(false),
            )
            .err()
            .unwrap();
        assert!(
            err.to_string().contains("job graph type mix-up: expected")
                && err.to_string().contains("Sender<"),
            "{err}"
        );
        assert!(ty.fanout(vec![TypeOf::<String>::arc().discard()]).is_err());
        assert_eq!(downcast::<u32>(Box::new(7u32)).unwrap(), 7);
    }
}

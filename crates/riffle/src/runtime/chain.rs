//! Operator chaining: each operator of a chain is wrapped in a [`ChainLink`] that calls it and
//! hands what it emits straight to the next link, on the same thread, without a copy.
//!
//! The link is also where failures get their name: an error returned by the operator, or a panic
//! inside it, becomes an error naming the operator and the subtask.

use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::checkpoint::{OperatorSnapshot, RestoreState, SnapshotWriter, TaskSnapshot};
use crate::error::{Error, Result, panic_message};
use crate::operators::{Collector, INITIAL_WATERMARK, Operator, OperatorContext, SideOutputs};
use crate::record::{CheckpointBarrier, Data, LatencyMarker, Record, Timestamp};
use crate::runtime::Output;

/// One operator of a chain and what follows it.
pub(crate) struct ChainLink<Op: Operator> {
    op: Op,
    next: Box<dyn Output<Op::Out>>,
    side: SideOutputs,
    buffer: Vec<Record<Op::Out>>,
    ctx: OperatorContext,
    watermark: Timestamp,
    restore: Option<RestoreState>,
}

impl<Op: Operator> ChainLink<Op> {
    pub(crate) fn new(
        op: Op,
        ctx: OperatorContext,
        next: Box<dyn Output<Op::Out>>,
        side: SideOutputs,
    ) -> Self {
        ChainLink {
            op,
            next,
            side,
            buffer: Vec::with_capacity(ctx.buffer_size),
            ctx,
            watermark: INITIAL_WATERMARK,
            restore: None,
        }
    }

    /// Restores `state` into the operator when it opens.
    pub(crate) fn with_restore(mut self, state: Option<RestoreState>) -> Self {
        self.restore = state;
        self
    }

    /// Runs `f` on the operator with a collector, flushes what it emitted, and names any failure.
    fn call<R>(
        &mut self,
        f: impl FnOnce(&mut Op, &mut Collector<'_, Op::Out>) -> Result<R>,
    ) -> Result<R> {
        let ChainLink {
            op,
            next,
            side,
            buffer,
            ctx,
            watermark,
            ..
        } = self;
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let mut out = Collector::new(next.as_mut(), buffer, side, ctx.buffer_size, *watermark);
            let result = f(op, &mut out).and_then(|r| out.flush().map(|()| r));
            ctx.metrics.add_out(out.emitted());
            result
        }));
        match outcome {
            Ok(result) => result.map_err(|e| e.in_operator(&ctx.name, ctx.subtask)),
            Err(payload) => Err(Error::Panic {
                operator: ctx.name.clone(),
                subtask: ctx.subtask,
                message: panic_message(payload.as_ref()),
            }),
        }
    }
}

impl<Op: Operator> Output<Op::In> for ChainLink<Op> {
    fn open(&mut self) -> Result<()> {
        let ctx = self.ctx.clone();
        self.call(|op, _| op.open(&ctx))?;
        if let Some(state) = self.restore.take() {
            if let Some(watermark) = state.watermark {
                // Not forwarded: every operator restores its own.
                self.watermark = self.watermark.max(watermark);
                self.ctx.metrics.set_watermark(self.watermark);
            }
            self.call(|op, _| op.restore_state(&state))?;
        }
        self.side.for_each(|s| s.open())?;
        self.next.open()
    }

    fn records(&mut self, batch: &mut Vec<Record<Op::In>>) -> Result<()> {
        self.ctx.metrics.add_in(batch.len());
        let result = self.call(|op, out| op.process(batch, out));
        batch.clear();
        result
    }

    fn shared_records(
        &mut self,
        batch: &[Record<Op::In>],
        copy: &mut Vec<Record<Op::In>>,
    ) -> Result<()> {
        if self.call(|op, out| op.process_shared(batch, out))? {
            self.ctx.metrics.add_in(batch.len());
            return Ok(());
        }
        copy.extend_from_slice(batch);
        self.records(copy)
    }

    fn watermark(&mut self, watermark: Timestamp) -> Result<()> {
        if watermark <= self.watermark {
            return Ok(());
        }
        self.watermark = watermark;
        self.ctx.metrics.set_watermark(watermark);
        self.call(|op, out| op.on_watermark(watermark, out))?;
        self.side.for_each(|s| s.watermark(watermark))?;
        self.next.watermark(watermark)
    }

    fn idle(&mut self, idle: bool) -> Result<()> {
        self.call(|op, _| op.on_idle(idle))?;
        self.side.for_each(|s| s.idle(idle))?;
        self.next.idle(idle)
    }

    fn barrier(&mut self, barrier: CheckpointBarrier, snapshot: &mut TaskSnapshot) -> Result<()> {
        let mut writer = SnapshotWriter::default();
        self.call(|op, _| op.snapshot_state(barrier.id, &mut writer))?;
        writer.watermark = Some(self.watermark);
        writer.keyed_operator = self.ctx.keyed;
        snapshot.operators.push(OperatorSnapshot {
            id: self.ctx.id.clone(),
            name: self.ctx.name.clone(),
            subtask: self.ctx.subtask,
            parallelism: self.ctx.parallelism,
            writer,
        });
        self.side.for_each(|s| s.barrier(barrier, snapshot))?;
        self.next.barrier(barrier, snapshot)
    }

    fn notify_complete(&mut self, checkpoint_id: u64) -> Result<()> {
        self.call(|op, _| op.notify_checkpoint_complete(checkpoint_id))?;
        self.side.for_each(|s| s.notify_complete(checkpoint_id))?;
        self.next.notify_complete(checkpoint_id)
    }

    fn end_input(&mut self, input: usize) -> Result<()> {
        self.call(|op, out| op.end_input(input, out))
    }

    fn latency_marker(&mut self, marker: LatencyMarker) -> Result<()> {
        self.ctx.metrics.record_latency(marker.created.elapsed());
        self.side.for_each(|s| s.latency_marker(marker))?;
        self.next.latency_marker(marker)
    }

    fn tick(&mut self) -> Result<()> {
        self.call(|op, out| op.on_tick(out))?;
        self.side.for_each(|s| s.tick())?;
        self.next.tick()
    }

    fn finish(&mut self) -> Result<()> {
        self.call(|op, out| op.close(out))?;
        self.side.for_each(|s| s.finish())?;
        self.next.finish()
    }
}

/// Several consumers of one stream: each gets every record. All but the last read them lent
/// ([`Output::shared_records`]): an operator that reads records by reference takes no copy,
/// the others a copy each.
pub(crate) struct Fanout<T> {
    outputs: Vec<Box<dyn Output<T>>>,
    copy: Vec<Record<T>>,
}

impl<T: Data> Fanout<T> {
    pub(crate) fn new(outputs: Vec<Box<dyn Output<T>>>) -> Self {
        Fanout {
            outputs,
            copy: Vec::new(),
        }
    }
}

impl<T: Data> Output<T> for Fanout<T> {
    fn open(&mut self) -> Result<()> {
        self.outputs.iter_mut().try_for_each(|o| o.open())
    }

    fn records(&mut self, batch: &mut Vec<Record<T>>) -> Result<()> {
        let (last, rest) = self
            .outputs
            .split_last_mut()
            .expect("a fan-out has outputs");
        for output in rest {
            self.copy.clear();
            output.shared_records(batch, &mut self.copy)?;
        }
        last.records(batch)
    }

    fn watermark(&mut self, watermark: Timestamp) -> Result<()> {
        self.outputs
            .iter_mut()
            .try_for_each(|o| o.watermark(watermark))
    }

    fn idle(&mut self, idle: bool) -> Result<()> {
        self.outputs.iter_mut().try_for_each(|o| o.idle(idle))
    }

    fn barrier(&mut self, barrier: CheckpointBarrier, snapshot: &mut TaskSnapshot) -> Result<()> {
        self.outputs
            .iter_mut()
            .try_for_each(|o| o.barrier(barrier, snapshot))
    }

    fn notify_complete(&mut self, checkpoint_id: u64) -> Result<()> {
        self.outputs
            .iter_mut()
            .try_for_each(|o| o.notify_complete(checkpoint_id))
    }

    fn latency_marker(&mut self, marker: LatencyMarker) -> Result<()> {
        self.outputs
            .iter_mut()
            .try_for_each(|o| o.latency_marker(marker))
    }

    fn tick(&mut self) -> Result<()> {
        self.outputs.iter_mut().try_for_each(|o| o.tick())
    }

    fn finish(&mut self) -> Result<()> {
        self.outputs.iter_mut().try_for_each(|o| o.finish())
    }
}

/// One input of a multi-input task seen from its producer: wraps each record into the task's
/// input type (`Either::Left` for the first input of a two-input operator) before the network
/// writer partitions it; control events pass unchanged.
pub(crate) struct IntoInput<A, U> {
    inner: Box<dyn Output<U>>,
    wrap: fn(A) -> U,
    buffer: Vec<Record<U>>,
}

impl<A, U> IntoInput<A, U> {
    pub(crate) fn new(inner: Box<dyn Output<U>>, wrap: fn(A) -> U) -> Self {
        IntoInput {
            inner,
            wrap,
            buffer: Vec::new(),
        }
    }
}

impl<A: Send, U: Send> Output<A> for IntoInput<A, U> {
    fn open(&mut self) -> Result<()> {
        self.inner.open()
    }
    fn records(&mut self, batch: &mut Vec<Record<A>>) -> Result<()> {
        let wrap = self.wrap;
        self.buffer.extend(batch.drain(..).map(|r| Record {
            value: wrap(r.value),
            timestamp: r.timestamp,
        }));
        self.inner.records(&mut self.buffer)
    }
    fn watermark(&mut self, watermark: Timestamp) -> Result<()> {
        self.inner.watermark(watermark)
    }
    fn idle(&mut self, idle: bool) -> Result<()> {
        self.inner.idle(idle)
    }
    fn barrier(&mut self, barrier: CheckpointBarrier, snapshot: &mut TaskSnapshot) -> Result<()> {
        self.inner.barrier(barrier, snapshot)
    }
    fn notify_complete(&mut self, checkpoint_id: u64) -> Result<()> {
        self.inner.notify_complete(checkpoint_id)
    }
    fn latency_marker(&mut self, marker: LatencyMarker) -> Result<()> {
        self.inner.latency_marker(marker)
    }
    fn tick(&mut self) -> Result<()> {
        self.inner.tick()
    }
    fn finish(&mut self) -> Result<()> {
        self.inner.finish()
    }
}

/// The output of a stream nobody consumes (a sink's, or a side stream left unused).
pub(crate) struct Discard;

impl<T: Send> Output<T> for Discard {
    fn records(&mut self, batch: &mut Vec<Record<T>>) -> Result<()> {
        batch.clear();
        Ok(())
    }
    fn watermark(&mut self, _: Timestamp) -> Result<()> {
        Ok(())
    }
    fn idle(&mut self, _: bool) -> Result<()> {
        Ok(())
    }
    fn barrier(&mut self, _: CheckpointBarrier, _: &mut TaskSnapshot) -> Result<()> {
        Ok(())
    }
    fn tick(&mut self) -> Result<()> {
        Ok(())
    }
    fn finish(&mut self) -> Result<()> {
        Ok(())
    }
}

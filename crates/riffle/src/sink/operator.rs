//! The operator at the end of a stream: hands batches to a [`SinkWriter`] and drives its
//! two-phase commit with the job's checkpoints.

use crate::checkpoint::{FINAL_SNAPSHOT, Redistribution, RestoreState, SnapshotWriter};
use crate::error::Result;
use crate::operators::{BuildOperator, Collector, Operator, OperatorContext};
use crate::record::{Data, Record, Timestamp};
use crate::sink::SinkWriter;

/// Writes every batch to a sink writer; pre-commits at barriers, commits on completion, recovers
/// on restore, and leaves the final commit of a bounded job to the job.
///
/// At the end of its input the operator pre-commits everything the writer still holds (the
/// committable goes into the task's final snapshot, so the job's final checkpoint records it)
/// and hands the writer's finalizer to the job, which runs it once a checkpoint holding that
/// final snapshot completed (or, without checkpoints, when the job ends).
///
/// As the job declares it: built on each subtask into an [`OpenSinkOperator`].
pub struct SinkOperator<T> {
    writer: Box<dyn SinkWriter<T>>,
}

/// A [`SinkOperator`] built on its subtask.
pub struct OpenSinkOperator<T> {
    writer: Box<dyn SinkWriter<T>>,
    /// What the restored checkpoint says to commit; `None` once the writer recovered.
    recover: Option<Vec<Vec<u8>>>,
    ctx: OperatorContext,
    /// Set when the operator closed: what its final snapshot stores.
    closed: Option<Option<Vec<u8>>>,
}

impl<T> SinkOperator<T> {
    /// The operator around `writer`.
    pub fn new(writer: Box<dyn SinkWriter<T>>) -> Self {
        SinkOperator { writer }
    }
}

impl<T: Data> BuildOperator for SinkOperator<T> {
    type Operator = OpenSinkOperator<T>;

    fn build(self, ctx: &OperatorContext) -> Result<OpenSinkOperator<T>> {
        Ok(OpenSinkOperator {
            writer: self.writer,
            recover: Some(Vec::new()),
            ctx: ctx.clone(),
            closed: None,
        })
    }
}

impl<T> OpenSinkOperator<T> {
    fn recovered(&mut self) -> Result<&mut Box<dyn SinkWriter<T>>> {
        if let Some(committables) = self.recover.take() {
            self.writer.recover(committables)?;
        }
        Ok(&mut self.writer)
    }
}

impl<T: Data> Operator for OpenSinkOperator<T> {
    type In = T;
    type Out = ();

    fn restore_state(&mut self, state: &RestoreState) -> Result<()> {
        // Every pending commit of every old subtask: the writer commits what is its own and
        // knows not to abort the others'.
        self.recover = Some(state.operator::<Vec<u8>>().collect::<Result<Vec<_>>>()?);
        Ok(())
    }

    fn process(&mut self, batch: &mut Vec<Record<T>>, _out: &mut Collector<'_, ()>) -> Result<()> {
        self.recovered()?.write(batch)
    }

    fn on_watermark(&mut self, watermark: Timestamp, _out: &mut Collector<'_, ()>) -> Result<()> {
        self.recovered()?.on_watermark(watermark)
    }

    fn on_idle(&mut self, idle: bool) -> Result<()> {
        self.recovered()?.on_idle(idle)
    }

    fn on_tick(&mut self, _out: &mut Collector<'_, ()>) -> Result<()> {
        self.recovered()?.flush()
    }

    fn snapshot_state(&mut self, checkpoint_id: u64, snapshot: &mut SnapshotWriter) -> Result<()> {
        if let Some(last) = &self.closed {
            // The final snapshot: everything the writer wrote, pre-committed when it closed.
            if let Some(committable) = last {
                snapshot.write_operator(Redistribution::Union, committable)?;
            }
            return Ok(());
        }
        if let Some(committable) = self.recovered()?.pre_commit(checkpoint_id)? {
            snapshot.write_operator(Redistribution::Union, &committable)?;
        }
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<()> {
        self.recovered()?.commit(checkpoint_id)
    }

    fn close(&mut self, _out: &mut Collector<'_, ()>) -> Result<()> {
        let last = self.recovered()?.pre_commit(FINAL_SNAPSHOT)?;
        self.closed = Some(last);
        let ctx = &self.ctx;
        if let Some(finalizer) = self.writer.close()?
            && let Some(finalizers) = &ctx.finalizers
        {
            finalizers.push(Some((ctx.id.clone(), ctx.subtask)), finalizer);
        }
        Ok(())
    }
}

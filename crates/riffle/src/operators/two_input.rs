//! Operators with two inputs (Flink's `TwoInputStreamOperator`): one hook per input, the rest
//! shared.
//!
//! Two connected streams reach their operator's task on one set of channels as [`Either`]
//! (`Left` from the first input, `Right` from the second), so that the task aligns barriers
//! across both and takes its watermark as the minimum of both inputs'. A [`TwoInputOperator`]
//! never sees that union: [`TwoInput`] splits each batch into runs of one input, in order, and
//! hands each run to [`process1`](TwoInputOperator::process1) or
//! [`process2`](TwoInputOperator::process2). Co-process functions, joins and broadcast
//! processing are written this way.

use crate::checkpoint::{RestoreState, SnapshotWriter};
use crate::error::Result;
use crate::operators::{Collector, Operator, OperatorContext};
use crate::record::{Data, Either, Record, Timestamp};

/// An operator over two inputs: records of the first input go to
/// [`process1`](Self::process1), of the second to [`process2`](Self::process2), each a run of
/// consecutive records of that input (so the order of records across the inputs is the order
/// of arrival). The watermark it sees is the minimum of both inputs'. Run it as an operator by
/// wrapping it in [`TwoInput`].
///
/// ```
/// use riffle::operators::{Collector, TwoInput, TwoInputOperator};
/// use riffle::testing::OperatorHarness;
/// use riffle::{Either, Record, Result};
///
/// /// Emits the sum of both inputs' records seen so far, after every run.
/// struct Sum(u64);
///
/// impl TwoInputOperator for Sum {
///     type In1 = u64;
///     type In2 = u32;
///     type Out = u64;
///     fn process1(&mut self, batch: &mut Vec<Record<u64>>, out: &mut Collector<'_, u64>) -> Result<()> {
///         self.0 += batch.drain(..).map(|r| r.value).sum::<u64>();
///         out.emit(Record::untimed(self.0))
///     }
///     fn process2(&mut self, batch: &mut Vec<Record<u32>>, out: &mut Collector<'_, u64>) -> Result<()> {
///         self.0 += batch.drain(..).map(|r| u64::from(r.value)).sum::<u64>();
///         out.emit(Record::untimed(self.0))
///     }
/// }
///
/// let mut h = OperatorHarness::builder(TwoInput::new(Sum(0))).build().unwrap();
/// let batch = [Either::Left(1), Either::Left(2), Either::Right(10), Either::Left(100)];
/// h.process_records(batch.into_iter().map(Record::untimed).collect()).unwrap();
/// assert_eq!(h.take_values(), vec![3, 13, 113]);
/// ```
pub trait TwoInputOperator: Send + 'static {
    /// Type of the first input's records.
    type In1: Data;
    /// Type of the second input's records.
    type In2: Data;
    /// Type of the records emitted.
    type Out: Data;

    /// Called once on the task's thread before the first record.
    fn open(&mut self, _ctx: &OperatorContext) -> Result<()> {
        Ok(())
    }

    /// Processes a run of the first input's records (it takes them out of `batch`).
    fn process1(
        &mut self,
        batch: &mut Vec<Record<Self::In1>>,
        out: &mut Collector<'_, Self::Out>,
    ) -> Result<()>;

    /// Processes a run of the second input's records (it takes them out of `batch`).
    fn process2(
        &mut self,
        batch: &mut Vec<Record<Self::In2>>,
        out: &mut Collector<'_, Self::Out>,
    ) -> Result<()>;

    /// After the runs of one batch of the inputs: work that is cheaper once per batch than once
    /// per run (publishing the state's size, say).
    fn end_of_batch(&mut self, _out: &mut Collector<'_, Self::Out>) -> Result<()> {
        Ok(())
    }

    /// The watermark of both inputs (their minimum) advanced: see [`Operator::on_watermark`].
    fn on_watermark(
        &mut self,
        _watermark: Timestamp,
        _out: &mut Collector<'_, Self::Out>,
    ) -> Result<()> {
        Ok(())
    }

    /// Processing-time work: see [`Operator::on_tick`].
    fn on_tick(&mut self, _out: &mut Collector<'_, Self::Out>) -> Result<()> {
        Ok(())
    }

    /// Writes the operator's state at a checkpoint: see [`Operator::snapshot_state`].
    fn snapshot_state(
        &mut self,
        _checkpoint_id: u64,
        _snapshot: &mut SnapshotWriter,
    ) -> Result<()> {
        Ok(())
    }

    /// Restores what [`snapshot_state`](Self::snapshot_state) wrote: see
    /// [`Operator::restore_state`].
    fn restore_state(&mut self, _state: &RestoreState) -> Result<()> {
        Ok(())
    }

    /// Checkpoint `checkpoint_id` completed: see [`Operator::notify_checkpoint_complete`].
    fn notify_checkpoint_complete(&mut self, _checkpoint_id: u64) -> Result<()> {
        Ok(())
    }

    /// Every record of input `input` (0: the first, 1: the second) arrived; the other input
    /// may go on.
    fn end_input(&mut self, _input: usize, _out: &mut Collector<'_, Self::Out>) -> Result<()> {
        Ok(())
    }

    /// Both inputs ended: emit what is still held.
    fn close(&mut self, _out: &mut Collector<'_, Self::Out>) -> Result<()> {
        Ok(())
    }
}

/// Runs a [`TwoInputOperator`] as an [`Operator`] over the union of its inputs (what a
/// two-input task feeds it): each batch is split into runs of one input, handed over in order.
pub struct TwoInput<T: TwoInputOperator> {
    operator: T,
    first: Vec<Record<T::In1>>,
    second: Vec<Record<T::In2>>,
}

impl<T: TwoInputOperator> TwoInput<T> {
    /// The operator running `operator`.
    pub fn new(operator: T) -> Self {
        TwoInput {
            operator,
            first: Vec::new(),
            second: Vec::new(),
        }
    }

    /// The two-input operator it runs.
    pub fn get_ref(&self) -> &T {
        &self.operator
    }

    /// The two-input operator it runs, mutably.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.operator
    }

    /// Hands the run held of the first input to the operator.
    fn flush_first(&mut self, out: &mut Collector<'_, T::Out>) -> Result<()> {
        if self.first.is_empty() {
            return Ok(());
        }
        let result = self.operator.process1(&mut self.first, out);
        self.first.clear();
        result
    }

    /// Hands the run held of the second input to the operator.
    fn flush_second(&mut self, out: &mut Collector<'_, T::Out>) -> Result<()> {
        if self.second.is_empty() {
            return Ok(());
        }
        let result = self.operator.process2(&mut self.second, out);
        self.second.clear();
        result
    }
}

impl<T: TwoInputOperator> Operator for TwoInput<T> {
    type In = Either<T::In1, T::In2>;
    type Out = T::Out;

    fn open(&mut self, ctx: &OperatorContext) -> Result<()> {
        self.operator.open(ctx)
    }

    fn process(
        &mut self,
        batch: &mut Vec<Record<Self::In>>,
        out: &mut Collector<'_, T::Out>,
    ) -> Result<()> {
        for record in batch.drain(..) {
            match record.value {
                Either::Left(a) => {
                    if !self.second.is_empty() {
                        self.flush_second(out)?;
                    }
                    self.first.push(Record::timed(a, record.timestamp));
                }
                Either::Right(b) => {
                    if !self.first.is_empty() {
                        self.flush_first(out)?;
                    }
                    self.second.push(Record::timed(b, record.timestamp));
                }
            }
        }
        // One of the two is empty: the last run goes last.
        self.flush_first(out)?;
        self.flush_second(out)?;
        self.operator.end_of_batch(out)
    }

    fn on_watermark(
        &mut self,
        watermark: Timestamp,
        out: &mut Collector<'_, T::Out>,
    ) -> Result<()> {
        self.operator.on_watermark(watermark, out)
    }

    fn on_tick(&mut self, out: &mut Collector<'_, T::Out>) -> Result<()> {
        self.operator.on_tick(out)
    }

    fn snapshot_state(&mut self, checkpoint_id: u64, snapshot: &mut SnapshotWriter) -> Result<()> {
        self.operator.snapshot_state(checkpoint_id, snapshot)
    }

    fn restore_state(&mut self, state: &RestoreState) -> Result<()> {
        self.operator.restore_state(state)
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<()> {
        self.operator.notify_checkpoint_complete(checkpoint_id)
    }

    fn end_input(&mut self, input: usize, out: &mut Collector<'_, T::Out>) -> Result<()> {
        self.operator.end_input(input, out)
    }

    fn close(&mut self, out: &mut Collector<'_, T::Out>) -> Result<()> {
        self.operator.close(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::OperatorHarness;

    /// Logs each run it is handed, with the watermark and the end of each input.
    #[derive(Default)]
    struct Runs;

    impl TwoInputOperator for Runs {
        type In1 = u32;
        type In2 = char;
        type Out = String;

        fn process1(
            &mut self,
            batch: &mut Vec<Record<u32>>,
            out: &mut Collector<'_, String>,
        ) -> Result<()> {
            let run: Vec<String> = batch.drain(..).map(|r| r.value.to_string()).collect();
            out.emit(Record::untimed(format!("1:{}", run.join(","))))
        }

        fn process2(
            &mut self,
            batch: &mut Vec<Record<char>>,
            out: &mut Collector<'_, String>,
        ) -> Result<()> {
            let run: String = batch.drain(..).map(|r| r.value).collect();
            out.emit(Record::untimed(format!("2:{run}")))
        }

        fn on_watermark(
            &mut self,
            watermark: Timestamp,
            out: &mut Collector<'_, String>,
        ) -> Result<()> {
            out.emit(Record::untimed(format!("wm {watermark}")))
        }

        fn end_input(&mut self, input: usize, out: &mut Collector<'_, String>) -> Result<()> {
            out.emit(Record::untimed(format!("end {input}")))
        }
    }

    #[test]
    fn each_run_of_one_input_goes_to_its_hook_in_arrival_order() -> Result<()> {
        let mut h = OperatorHarness::builder(TwoInput::new(Runs)).build()?;
        let batch =
            |values: Vec<Either<u32, char>>| values.into_iter().map(Record::untimed).collect();
        h.process_records(batch(vec![
            Either::Left(1),
            Either::Left(2),
            Either::Right('a'),
            Either::Right('b'),
            Either::Left(3),
            Either::Right('c'),
        ]))?;
        h.process_records(batch(vec![Either::Right('d')]))?;
        h.process_records(batch(vec![]))?;
        h.watermark(10)?;
        h.end_input(1)?;
        assert_eq!(
            h.take_values(),
            vec!["1:1,2", "2:ab", "1:3", "2:c", "2:d", "wm 10", "end 1"]
        );
        Ok(())
    }
}

//! Writing inside a process group: the records after barrier N go to the group's transaction
//! for that epoch, which the group commits with its offsets (shared by sinks and shuffles).

use std::time::Duration;

use riffle::record::{Data, Record};
use riffle::sink::{Finalizer, SinkWriter};

use super::Encoder;
use super::producer::KafkaProducer;
use crate::KafkaGroup;

/// Where a writer subtask of a process group writes: the records after barrier `epoch` go to the
/// group's transaction for that epoch, which the group commits with the offsets of the next
/// checkpoint that completes. Shared by the group's sinks and Kafka shuffles.
pub(crate) struct GroupOutput {
    pub(super) group: KafkaGroup,
    pub(super) topic: String,
    pub(super) timeout: Duration,
    /// The last barrier this subtask saw (0: none yet).
    pub(super) epoch: u64,
    /// The producer of the epoch's transaction, once something was written in it.
    pub(super) producer: Option<KafkaProducer>,
}

impl GroupOutput {
    pub(crate) fn new(group: &KafkaGroup, topic: &str, timeout: Duration) -> GroupOutput {
        GroupOutput {
            group: group.clone(),
            topic: topic.to_string(),
            timeout,
            epoch: 0,
            producer: None,
        }
    }

    /// The producer of the epoch's transaction (begun on first use); fails once the group
    /// moved partitions, so that nothing more is written in this run.
    pub(crate) fn producer(&mut self) -> riffle::Result<&KafkaProducer> {
        if self.group.rebalanced() {
            return Err(self.group.rebalanced_error());
        }
        if self.producer.is_none() {
            self.producer = Some(KafkaProducer {
                producer: self.group.producer(self.epoch)?,
                topic: self.topic.clone(),
                timeout: self.timeout,
            });
        }
        Ok(self.producer.as_ref().expect("set above"))
    }

    pub(crate) fn serve(&self) -> riffle::Result<()> {
        match &self.producer {
            Some(producer) => producer.serve(),
            None => Ok(()),
        }
    }

    /// Barrier `checkpoint_id`: what follows goes to the next transaction.
    pub(crate) fn pre_commit(&mut self, checkpoint_id: u64) -> riffle::Result<()> {
        if let Some(producer) = self.producer.take() {
            producer.flush()?;
        }
        self.epoch = checkpoint_id;
        Ok(())
    }

    pub(crate) fn commit(&self, checkpoint_id: u64) -> riffle::Result<()> {
        self.group.commit(checkpoint_id)
    }
}

/// A sink subtask of a process group.
pub(super) struct GroupWriter<T> {
    pub(super) output: GroupOutput,
    pub(super) encoder: Encoder<T>,
}

impl<T: Data> SinkWriter<T> for GroupWriter<T> {
    fn write(&mut self, batch: &mut Vec<Record<T>>) -> riffle::Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.output.producer()?.send_batch(&mut self.encoder, batch)
    }

    fn flush(&mut self) -> riffle::Result<()> {
        self.output.serve()
    }

    fn pre_commit(&mut self, checkpoint_id: u64) -> riffle::Result<Option<Vec<u8>>> {
        self.output.pre_commit(checkpoint_id).map(|()| None)
    }

    fn commit(&mut self, checkpoint_id: u64) -> riffle::Result<()> {
        self.output.commit(checkpoint_id)
    }

    fn close(&mut self) -> riffle::Result<Option<Finalizer>> {
        // What was not committed is aborted by the group's run (`run_in_group`).
        Ok(None)
    }
}

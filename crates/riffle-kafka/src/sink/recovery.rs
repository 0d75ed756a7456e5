//! The exactly-once sink's recovery: transactions a restored checkpoint pre-committed are
//! committed again, or, when their producer was fenced, their records (still in the log,
//! aborted) are read back and written again in a new transaction, unless a `read_committed`
//! read shows the commit happened.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};
use riffle::ConnectorErrorKind;
use riffle::sink::{Ending, Finalizer};

use super::TXN_HEADER;
use super::exactly_once::{
    Committable, Slot, TransactionInfo, Transactions, commit, hex, transactional_id, txn_header,
};
use super::producer::Target;
use crate::{kafka_error, kafka_failure};

impl Transactions {
    /// Serves the open transaction's delivery reports; fails if a delivery failed.
    pub(crate) fn serve(&mut self) -> riffle::Result<()> {
        match &self.open {
            Some(open) => open.slot.producer.serve(),
            None => Ok(()),
        }
    }

    /// At the barrier of `checkpoint_id`: flushes the open transaction, keeps it until the
    /// checkpoint completes; returns what the checkpoint stores.
    pub(crate) fn pre_commit(&mut self, checkpoint_id: u64) -> riffle::Result<Vec<u8>> {
        self.init_pool()?;
        if let Some(pending) = self.pre_commit_open()? {
            self.pending.insert(checkpoint_id, pending);
        }
        riffle::checkpoint::encode(&Committable {
            subtask: self.subtask,
            parallelism: self.parallelism,
            pool_size: self.pool_size,
            pending: self.pending.values().map(|p| p.info.clone()).collect(),
        })
    }

    /// Checkpoint `checkpoint_id` completed: commits the transactions it covers.
    pub(crate) fn commit(&mut self, checkpoint_id: u64) -> riffle::Result<()> {
        let later = self.pending.split_off(&(checkpoint_id + 1));
        let due = std::mem::replace(&mut self.pending, later);
        for (_, pending) in due {
            commit(&pending.slot)?;
            self.free.push(pending.slot);
        }
        Ok(())
    }

    /// On restore: fences the ids of earlier runs and finishes the commits of the restored
    /// checkpoint that a failure interrupted.
    pub(crate) fn recover(&mut self, committables: Vec<Vec<u8>>) -> riffle::Result<()> {
        let committables = committables
            .iter()
            .map(|bytes| riffle::checkpoint::decode::<Committable>(bytes))
            .collect::<riffle::Result<Vec<_>>>()?;
        // First fence: our own ids, then the other ids of the restored checkpoint that are ours
        // to clean up and that no producer of this job uses any more.
        self.init_pool()?;
        for old in &committables {
            for slot in self.stale_slots(old) {
                let id = transactional_id(&self.prefix, old.subtask, slot);
                drop(self.target.producer(Some(&id))?);
                tracing::info!(transactional_id = %id, "fenced a transactional id the job no longer uses");
            }
        }
        // Then make sure every transaction the restored checkpoint pre-committed is committed.
        let recovery = self.free.last().expect("pool initialised");
        for old in committables
            .iter()
            .filter(|c| c.subtask % self.parallelism == self.subtask)
        {
            for txn in &old.pending {
                if !txn.ranges.is_empty() && !is_committed(&self.target, txn)? {
                    rewrite(&self.target, txn, recovery)?;
                }
            }
        }
        Ok(())
    }

    /// The input ended: pre-commits the open transaction; the finalizer commits what is due.
    pub(crate) fn close(&mut self) -> riffle::Result<Finalizer> {
        let last = self.pre_commit_open()?;
        let pending = std::mem::take(&mut self.pending);
        Ok(Box::new(move |ending| {
            for (checkpoint, txn) in pending {
                if matches!(ending, Ending::Stopped { up_to } if checkpoint > up_to) {
                    // After the savepoint: not to be visible; the restored job aborts it.
                    continue;
                }
                commit(&txn.slot)?;
            }
            if let (Some(txn), Ending::Drained) = (last, ending) {
                commit(&txn.slot)?;
            }
            Ok(())
        }))
    }
}

/// Reads `partition` from `from` with `consumer` until `until` returns `true` for a message or the
/// end of the partition (`None`), or the timeout passes.
pub(super) fn read_partition(
    consumer: &BaseConsumer,
    topic: &str,
    partition: i32,
    from: i64,
    timeout: Duration,
    mut until: impl FnMut(Option<&rdkafka::message::BorrowedMessage<'_>>, i64) -> riffle::Result<bool>,
) -> riffle::Result<()> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(from))
        .and_then(|()| consumer.assign(&tpl))
        .map_err(|e| kafka_error("cannot assign a partition for recovery", e))?;
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(message)) => {
                let offset = message.offset();
                if until(Some(&message), offset)? {
                    return Ok(());
                }
            }
            Some(Err(KafkaError::PartitionEOF(_))) => {
                let position = consumer
                    .position()
                    .ok()
                    .and_then(|p| p.find_partition(topic, partition).map(|p| p.offset()));
                let end = match position {
                    Some(Offset::Offset(end)) => end,
                    _ => from,
                };
                if until(None, end)? {
                    return Ok(());
                }
            }
            Some(Err(e)) => tracing::warn!(error = %e, "Kafka consumer error during sink recovery"),
        }
    }
    Err(kafka_failure(
        ConnectorErrorKind::Retriable,
        format!("sink recovery could not read {topic}-{partition} from offset {from}"),
        format!(
            "nothing readable within the broker timeout ({timeout:?}): an open transaction of \
             another producer holds read_committed readers back, or the broker is unreachable"
        ),
    ))
}

/// Whether the records of `txn` are visible to `read_committed` readers (it is resolved: the
/// producers that could have it open were fenced). They are if its first record is (the
/// transaction committed), or if a later committed record carries its label (a copy an earlier
/// recovery wrote).
pub(super) fn is_committed(target: &Target, txn: &TransactionInfo) -> riffle::Result<bool> {
    let consumer = target.consumer("read_committed")?;
    let (partition, first, _) = txn.ranges[0];
    let mut committed = false;
    read_partition(
        &consumer,
        &target.topic,
        partition,
        first,
        target.timeout,
        |message, end| {
            match message {
                Some(message) => {
                    committed = message.offset() == first || has_label(message, &txn.label);
                    Ok(committed)
                }
                // At the end of what is readable: decided once the end is past the first record.
                None => Ok(end > first),
            }
        },
    )?;
    tracing::info!(transaction = %hex(&txn.label), committed, "checked a transaction the restored checkpoint pre-committed");
    Ok(committed)
}

pub(super) fn has_label(message: &rdkafka::message::BorrowedMessage<'_>, label: &[u8]) -> bool {
    message.headers().is_some_and(|headers| {
        headers
            .iter()
            .any(|h| h.key == TXN_HEADER && h.value == Some(label))
    })
}

/// Writes the records of the aborted transaction `txn` again (read back from the log, where
/// aborted records stay, at the offsets its producer wrote) in a new transaction on `slot`, each
/// with a header naming `txn`, so that a later recovery sees the copy.
pub(super) fn rewrite(target: &Target, txn: &TransactionInfo, slot: &Slot) -> riffle::Result<()> {
    struct Copy {
        partition: i32,
        key: Option<Vec<u8>>,
        /// `None`: a tombstone.
        payload: Option<Vec<u8>>,
        timestamp: Option<i64>,
        headers: Option<OwnedHeaders>,
    }
    let consumer = target.consumer("read_uncommitted")?;
    let mut records = Vec::new();
    for &(partition, first, last) in &txn.ranges {
        read_partition(
            &consumer,
            &target.topic,
            partition,
            first,
            target.timeout,
            |message, end| {
                let Some(message) = message else {
                    return Ok(end > last);
                };
                if (first..=last).contains(&message.offset()) {
                    records.push(Copy {
                        partition,
                        key: message.key().map(<[u8]>::to_vec),
                        payload: message.payload().map(<[u8]>::to_vec),
                        timestamp: message.timestamp().to_millis(),
                        headers: message.headers().map(|h| h.detach()),
                    });
                }
                Ok(message.offset() >= last)
            },
        )?;
    }
    let producer = &slot.producer;
    producer
        .producer
        .begin_transaction()
        .map_err(|e| kafka_error("cannot begin a recovery transaction", e))?;
    for copy in &records {
        let mut record = BaseRecord::to(&producer.topic)
            .partition(copy.partition)
            .headers(txn_header(copy.headers.clone(), &txn.label));
        if let Some(payload) = &copy.payload {
            record = record.payload(payload.as_slice());
        }
        if let Some(key) = &copy.key {
            record = record.key(key.as_slice());
        }
        if let Some(timestamp) = copy.timestamp {
            record = record.timestamp(timestamp);
        }
        producer.enqueue(record)?;
    }
    producer.flush()?;
    commit(slot)?;
    tracing::warn!(
        transaction = %hex(&txn.label), records = records.len(),
        "rewrote a pre-committed transaction whose commit a failure interrupted"
    );
    Ok(())
}

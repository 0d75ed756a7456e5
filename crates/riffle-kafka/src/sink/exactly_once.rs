//! Exactly-once: one Kafka transaction per checkpoint interval on a small pool of transactional
//! producers, pre-committed at the barrier and committed when the checkpoint completes.

use std::collections::BTreeMap;

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::Producer;
use riffle::ConnectorErrorKind;
use riffle::operators::OperatorContext;
use riffle::record::{Data, Record};
use riffle::sink::{Finalizer, SinkWriter};
use serde::{Deserialize, Serialize};

use super::producer::{KafkaProducer, Target};
use super::{Encoder, TXN_HEADER};
use crate::{kafka_error, kafka_failure};

/// A transaction as a checkpoint stores it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct TransactionInfo {
    pub(super) transactional_id: String,
    /// Names the transaction in the `riffle.txn` header of a recovery's copies (12 bytes, see
    /// [`label`]).
    pub(super) label: Vec<u8>,
    /// The offsets written, as runs of consecutive offsets: partition, first, last.
    pub(super) ranges: Vec<(i32, i64, i64)>,
}

/// What a checkpoint stores for one sink subtask.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Committable {
    pub(super) subtask: usize,
    pub(super) parallelism: usize,
    pub(super) pool_size: usize,
    pub(super) pending: Vec<TransactionInfo>,
}

/// A producer of the pool with its transactional id.
pub(super) struct Slot {
    pub(super) transactional_id: String,
    pub(super) producer: KafkaProducer,
}

pub(super) struct OpenTransaction {
    pub(super) slot: Slot,
    pub(super) label: Vec<u8>,
}

pub(super) struct PendingTransaction {
    pub(super) slot: Slot,
    pub(super) info: TransactionInfo,
}

/// The transactions of one writing subtask: a pool of transactional producers, the open
/// transaction, the pre-committed ones waiting for their checkpoints; shared by the exactly-once
/// sink and the producer of a Kafka shuffle (which writes its own records into the open one).
pub(crate) struct Transactions {
    pub(super) target: Target,
    pub(super) prefix: String,
    pub(super) subtask: usize,
    pub(super) parallelism: usize,
    pub(super) run: String,
    pub(super) pool_size: usize,
    /// Producers without a transaction.
    pub(super) free: Vec<Slot>,
    /// Whether the pool was initialised (fencing earlier producers with the same ids).
    pub(super) ready: bool,
    pub(super) open: Option<OpenTransaction>,
    /// Pre-committed transactions by checkpoint, waiting for it to complete.
    pub(super) pending: BTreeMap<u64, PendingTransaction>,
    pub(super) sequence: u64,
}

/// The exactly-once sink's writer: encodes records into the open transaction.
pub(super) struct TransactionalWriter<T> {
    pub(super) txns: Transactions,
    pub(super) encoder: Encoder<T>,
}

/// The label of a subtask's `sequence`-th transaction in run `run`: 8 bytes naming the run and
/// subtask, 4 the sequence.
pub(super) fn label(run: &str, subtask: usize, sequence: u64) -> Vec<u8> {
    let mut label = riffle::keys::stable_hash(&(run, subtask as u64))
        .to_be_bytes()
        .to_vec();
    label.extend_from_slice(&(sequence as u32).to_be_bytes());
    label
}

/// The headers of a record written in the transaction labelled `label`: its own (a shuffle's
/// records carry some) and `riffle.txn`.
pub(super) fn txn_header(headers: Option<OwnedHeaders>, label: &[u8]) -> OwnedHeaders {
    headers
        .unwrap_or_else(|| OwnedHeaders::new_with_capacity(1))
        .insert(Header {
            key: TXN_HEADER,
            value: Some(label),
        })
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn transactional_id(prefix: &str, subtask: usize, slot: usize) -> String {
    format!("{prefix}-{subtask}-{slot}")
}

impl Transactions {
    /// The transactions of subtask `ctx.subtask`, with ids `<prefix>-<subtask>-<slot>`.
    pub(crate) fn new(
        target: Target,
        prefix: String,
        ctx: &OperatorContext,
        pool_size: usize,
    ) -> Self {
        Transactions {
            target,
            prefix,
            subtask: ctx.subtask,
            parallelism: ctx.parallelism,
            run: ctx.run_id.clone(),
            pool_size,
            free: Vec::new(),
            ready: false,
            open: None,
            pending: BTreeMap::new(),
            sequence: 0,
        }
    }

    /// The producer of the open transaction (one begins if none is open).
    pub(crate) fn producer(&mut self) -> riffle::Result<&KafkaProducer> {
        Ok(&self.open()?.slot.producer)
    }

    /// The slots of the checkpointed subtask `old` that this subtask fences on restore, since no
    /// producer of the job uses their ids any more: those beyond a pool that shrank, and all of a
    /// subtask that no longer exists and maps onto this one.
    pub(super) fn stale_slots(&self, old: &Committable) -> std::ops::Range<usize> {
        if old.subtask == self.subtask {
            self.pool_size.min(old.pool_size)..old.pool_size
        } else if old.subtask >= self.parallelism && old.subtask % self.parallelism == self.subtask
        {
            0..old.pool_size
        } else {
            0..0
        }
    }

    /// Creates the pool's producers; initialising their ids aborts what earlier runs left open.
    pub(super) fn init_pool(&mut self) -> riffle::Result<()> {
        if self.ready {
            return Ok(());
        }
        for slot in 0..self.pool_size {
            let id = transactional_id(&self.prefix, self.subtask, slot);
            let producer = self.target.producer(Some(&id))?;
            self.free.push(Slot {
                transactional_id: id,
                producer,
            });
        }
        self.free.reverse();
        self.ready = true;
        Ok(())
    }

    /// The open transaction, beginning one on a free producer if there is none.
    pub(super) fn open(&mut self) -> riffle::Result<&mut OpenTransaction> {
        self.init_pool()?;
        if self.open.is_none() {
            let slot = self.free.pop().ok_or_else(|| {
                kafka_failure(
                    ConnectorErrorKind::Retriable,
                    format!("no free producer for `{}`", self.target.topic),
                    format!(
                        "{} transactions wait for their checkpoints to complete (checkpoints keep \
                         failing?); raise transaction_pool or fix the checkpoints",
                        self.pending.len()
                    ),
                )
            })?;
            slot.producer.producer.begin_transaction().map_err(|e| {
                kafka_error(
                    format!("cannot begin a transaction on `{}`", slot.transactional_id),
                    e,
                )
            })?;
            slot.producer
                .producer
                .context()
                .ranges
                .lock()
                .expect("ranges lock")
                .clear();
            let label = label(&self.run, self.subtask, self.sequence);
            self.sequence += 1;
            self.open = Some(OpenTransaction { slot, label });
        }
        Ok(self.open.as_mut().expect("opened above"))
    }

    /// Flushes the open transaction and turns it into a pending one.
    pub(super) fn pre_commit_open(&mut self) -> riffle::Result<Option<PendingTransaction>> {
        let Some(open) = self.open.take() else {
            return Ok(None);
        };
        open.slot.producer.flush()?;
        let ranges = open
            .slot
            .producer
            .producer
            .context()
            .ranges
            .lock()
            .expect("ranges lock")
            .iter()
            .flat_map(|(&partition, runs)| {
                runs.iter()
                    .map(move |&(first, last)| (partition, first, last))
            })
            .collect();
        Ok(Some(PendingTransaction {
            info: TransactionInfo {
                transactional_id: open.slot.transactional_id.clone(),
                label: open.label,
                ranges,
            },
            slot: open.slot,
        }))
    }
}

pub(super) fn commit(slot: &Slot) -> riffle::Result<()> {
    slot.producer
        .producer
        .commit_transaction(slot.producer.timeout)
        .map_err(|e| {
            kafka_error(
                format!(
                    "cannot commit the transaction of `{}`",
                    slot.transactional_id
                ),
                e,
            )
        })
}

impl<T: Data> SinkWriter<T> for TransactionalWriter<T> {
    fn write(&mut self, batch: &mut Vec<Record<T>>) -> riffle::Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let producer = self.txns.producer()?;
        producer.send_batch(&mut self.encoder, batch)
    }

    fn flush(&mut self) -> riffle::Result<()> {
        self.txns.serve()
    }

    fn pre_commit(&mut self, checkpoint_id: u64) -> riffle::Result<Option<Vec<u8>>> {
        self.txns.pre_commit(checkpoint_id).map(Some)
    }

    fn commit(&mut self, checkpoint_id: u64) -> riffle::Result<()> {
        self.txns.commit(checkpoint_id)
    }

    fn recover(&mut self, committables: Vec<Vec<u8>>) -> riffle::Result<()> {
        self.txns.recover(committables)
    }

    fn close(&mut self) -> riffle::Result<Option<Finalizer>> {
        self.txns.close().map(Some)
    }
}

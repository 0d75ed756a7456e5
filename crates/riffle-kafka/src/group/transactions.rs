//! The member's transactions: a pool of transactional producers, the transaction each barrier
//! opens, and the commit of a checkpoint's transaction with the source offsets it recorded and
//! the note naming its snapshot (`note`) — one Kafka transaction per commit and member, with
//! the member's group metadata, so that a member out of the group cannot commit.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::MutexGuard;
use std::sync::atomic::{AtomicBool, Ordering};

use rdkafka::consumer::Consumer;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::{Offset, TopicPartitionList};
use riffle::checkpoint::{CheckpointStorage, RetentionFloor, checkpoint_dir};
use riffle::{ConnectorErrorKind, JobFingerprint};

use super::{KafkaGroup, POOL, REPORTS_POLL, TIMEOUT, TRANSACTION_TIMEOUT_MS, note, restore};
use crate::sink::Deliveries;
use crate::{kafka_error, kafka_failure};

/// One transaction of the process, on a producer of the pool.
pub(super) struct Open {
    producer: Arc<BaseProducer<Deliveries>>,
    id: String,
}

impl Open {
    /// Aborts the transaction, and the producer forgets the aborted transaction's delivery
    /// failures. librdkafka purges what is still queued or in flight and waits for the purged
    /// records' reports before it aborts: a thread serves them meanwhile (nothing else polls
    /// the producer once its run ended).
    pub(super) fn abort(&self) -> rdkafka::error::KafkaResult<()> {
        let aborted = AtomicBool::new(false);
        let result = std::thread::scope(|scope| {
            scope.spawn(|| {
                while !aborted.load(Ordering::Acquire) {
                    self.producer.poll(REPORTS_POLL);
                }
            });
            let result = self.producer.abort_transaction(TIMEOUT);
            aborted.store(true, Ordering::Release);
            result
        });
        self.producer.context().clear();
        result
    }
}

/// The process's transactional producers and the offsets checkpoints recorded.
#[derive(Default)]
pub(super) struct Transactions {
    pub(super) free: Vec<Open>,
    /// Open transactions by the barrier after which their records were written (0: the run's
    /// start).
    pub(super) open: BTreeMap<u64, Open>,
    /// By checkpoint: the next offset of each partition the run reads, and what else its reader
    /// needs to resume there (a shuffle partition's producer clocks).
    pub(super) offsets: BTreeMap<u64, BTreeMap<(String, i32), Position>>,
    /// The last checkpoint committed in this run.
    pub(super) committed: u64,
    /// The generation the current run started at.
    pub(super) run: u64,
    /// Producers created (names the next one's transactional id).
    pub(super) created: usize,
    /// Where the run's snapshots are named by the offsets they were taken at.
    pub(super) state: Option<RunState>,
}

/// The run's checkpoint storage, seen from its root (shared by the group's processes), and what
/// its commits say.
pub(super) struct RunState {
    pub(super) storage: CheckpointStorage,
    /// The run's job directory under the root.
    pub(super) job: String,
    /// The run's job, checked against the group's commits before its first commit.
    pub(super) fingerprint: JobFingerprint,
    /// Whether that check was done.
    pub(super) checked: bool,
    /// What the run's retention keeps: from the checkpoint its last commit names on.
    pub(super) floor: RetentionFloor,
}

/// Where a partition's reader stood at a checkpoint.
#[derive(Clone, Debug)]
pub(super) struct Position {
    pub(super) next: i64,
    /// What the reader needs besides the offset to resume there (kept beside the snapshot).
    pub(super) reader: Option<serde_json::Value>,
}

impl KafkaGroup {
    /// Aborts every transaction the run left open. A producer that cannot abort (fenced: the
    /// broker aborted its transaction after the timeout while the process was paused) is
    /// dropped; the next run creates a new one.
    pub(super) fn abort_run(&self) {
        let mut transactions = self.inner.transactions.lock().expect("transactions lock");
        let open = std::mem::take(&mut transactions.open);
        transactions.offsets.clear();
        for (_, txn) in open {
            match txn.abort() {
                Ok(()) => transactions.free.push(txn),
                Err(e) => {
                    tracing::warn!(transactional_id = %txn.id, error = %e, "group: cannot abort a transaction; the producer is replaced");
                }
            }
        }
    }

    /// A source reader of the run records where partition (topic, partition) stands at
    /// checkpoint `checkpoint`: the next offset, and what else it needs to resume there
    /// (`reader`, given back by [`restored_reader`](Self::restored_reader) to the next run that
    /// starts at that offset).
    pub(crate) fn record_offset(
        &self,
        checkpoint: u64,
        topic: &str,
        partition: i32,
        next: i64,
        reader: Option<serde_json::Value>,
    ) {
        let mut transactions = self.inner.transactions.lock().expect("transactions lock");
        transactions
            .offsets
            .entry(checkpoint)
            .or_default()
            .insert((topic.to_string(), partition), Position { next, reader });
    }

    /// The producer of the transaction that collects the records written after barrier
    /// `epoch` (0: the run's start), beginning it if needed.
    pub(crate) fn producer(&self, epoch: u64) -> riffle::Result<Arc<BaseProducer<Deliveries>>> {
        let mut transactions = self.inner.transactions.lock().expect("transactions lock");
        self.open(&mut transactions, epoch)
            .map(|txn| txn.producer.clone())
    }

    pub(super) fn open<'a>(
        &self,
        transactions: &'a mut MutexGuard<'_, Transactions>,
        epoch: u64,
    ) -> riffle::Result<&'a Open> {
        if !transactions.open.contains_key(&epoch) {
            let txn = match transactions.free.pop() {
                Some(txn) => txn,
                None => {
                    let slots = transactions.open.len();
                    if slots >= POOL {
                        return Err(kafka_failure(
                            ConnectorErrorKind::Retriable,
                            format!("consumer group `{}`", self.inner.name),
                            format!(
                                "{slots} transactions wait for their checkpoints to complete (checkpoints keep failing?)"
                            ),
                        ));
                    }
                    transactions.created += 1;
                    self.new_producer(transactions.created)?
                }
            };
            txn.producer.begin_transaction().map_err(|e| {
                kafka_error(format!("cannot begin a transaction on `{}`", txn.id), e)
            })?;
            transactions.open.insert(epoch, txn);
        }
        Ok(transactions.open.get(&epoch).expect("opened above"))
    }

    pub(super) fn new_producer(&self, slot: usize) -> riffle::Result<Open> {
        let id = format!("{}-{}-{slot}", self.inner.name, self.inner.instance);
        let producer: BaseProducer<Deliveries> = self
            .inner
            .kafka
            .client_config_with(&[
                ("enable.idempotence", "true"),
                ("acks", "all"),
                ("linger.ms", "5"),
                ("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS),
            ])
            .set("transactional.id", &id)
            .create_with_context(Deliveries::default())
            .map_err(|e| kafka_error("cannot create a producer", e))?;
        producer
            .init_transactions(TIMEOUT)
            .map_err(|e| kafka_error(format!("cannot initialise transactions of `{id}`"), e))?;
        Ok(Open {
            producer: Arc::new(producer),
            id,
        })
    }

    /// Checkpoint `checkpoint` completed: the transactions of the records written before its
    /// barrier commit, with the offsets it stored. Idempotent: every sink subtask calls it.
    pub(crate) fn commit(&self, checkpoint: u64) -> riffle::Result<()> {
        let mut transactions = self.inner.transactions.lock().expect("transactions lock");
        if checkpoint <= transactions.committed {
            return Ok(());
        }
        if !transactions.offsets.contains_key(&checkpoint) {
            // Not a checkpoint of this run (its sources record their offsets at every barrier):
            // the restored one, which a restore announces as complete at the start. Its
            // records were committed by the run that took it; what this run wrote so far waits
            // for this run's first checkpoint.
            return Ok(());
        }
        if self.generation() != transactions.run {
            return Err(self.rebalanced_error());
        }
        let later = transactions.open.split_off(&checkpoint);
        let due = std::mem::replace(&mut transactions.open, later);
        tracing::debug!(
            checkpoint,
            due = ?due.keys().collect::<Vec<_>>(),
            open = ?transactions.open.keys().collect::<Vec<_>>(),
            offsets = transactions.offsets.get(&checkpoint).map_or(0, |o| o.len()),
            "group: commit"
        );
        if due.len() > 1 {
            // Records before this barrier sit in two transactions (a checkpoint in between was
            // aborted after some sinks saw its barrier): they cannot commit atomically.
            transactions.open.extend(due);
            return Err(kafka_failure(
                ConnectorErrorKind::Retriable,
                format!("consumer group `{}`", self.inner.name),
                "a checkpoint was aborted between two commits: the run starts again from the committed offsets",
            ));
        }
        let later_offsets = transactions.offsets.split_off(&(checkpoint + 1));
        let offsets = std::mem::replace(&mut transactions.offsets, later_offsets)
            .remove(&checkpoint)
            .unwrap_or_default();
        let txn = match due.into_values().next() {
            Some(txn) => txn,
            None if offsets.is_empty() => {
                transactions.committed = checkpoint;
                return Ok(());
            }
            None => {
                // Nothing was written, but the offsets moved: commit them alone.
                self.open(&mut transactions, u64::MAX)?;
                transactions.open.remove(&u64::MAX).expect("opened above")
            }
        };
        let result = self
            .before_commit(&mut transactions, checkpoint, &offsets)
            .and_then(|note| self.commit_transaction(&txn, &offsets, &note));
        // A producer whose transaction could neither commit nor abort is dropped.
        if result.is_ok() || txn.abort().is_ok() {
            transactions.free.push(txn);
        }
        result?;
        transactions.committed = checkpoint;
        if let Some(state) = &transactions.state {
            // Retention keeps this checkpoint (the commit names it) and later ones.
            state.floor.raise(checkpoint);
        }
        Ok(())
    }

    /// What the commit of checkpoint `checkpoint` needs first: the run's job checked against
    /// the group's commits (at its first commit: two members may have started at once), and
    /// where its readers stood written; returns the note its offsets carry.
    pub(super) fn before_commit(
        &self,
        transactions: &mut Transactions,
        checkpoint: u64,
        offsets: &BTreeMap<(String, i32), Position>,
    ) -> riffle::Result<note::CommitNote> {
        let Some(state) = &mut transactions.state else {
            return Ok(note::CommitNote {
                member: self.inner.label.clone(),
                ..note::CommitNote::default()
            });
        };
        if !state.checked {
            self.check_job(&state.storage, &state.fingerprint)?;
            state.checked = true;
        }
        self.write_readers(state, checkpoint, offsets)?;
        Ok(note::CommitNote {
            member: self.inner.label.clone(),
            run: Some(state.job.clone()),
            checkpoint: Some(checkpoint),
            job: Some(state.fingerprint.hash()),
        })
    }

    /// Writes where the readers of the partitions about to commit stood at checkpoint
    /// `checkpoint`, into that checkpoint's directory ([`restore::READERS_FILE`]), before the
    /// commit that names it: a new owner of a partition resumes its event time there.
    pub(super) fn write_readers(
        &self,
        state: &RunState,
        checkpoint: u64,
        offsets: &BTreeMap<(String, i32), Position>,
    ) -> riffle::Result<()> {
        let readers: Vec<restore::ReaderAt> = offsets
            .iter()
            .filter_map(|((topic, partition), position)| {
                Some(restore::ReaderAt {
                    topic: topic.clone(),
                    partition: *partition,
                    reader: position.reader.clone()?,
                })
            })
            .collect();
        if readers.is_empty() {
            return Ok(());
        }
        let bytes = serde_json::to_vec(&readers).map_err(riffle::Error::user)?;
        let file = format!(
            "{}/{}/{}",
            state.job,
            checkpoint_dir(checkpoint),
            restore::READERS_FILE
        );
        state.storage.write(&file, bytes).map(drop)
    }

    pub(super) fn commit_transaction(
        &self,
        txn: &Open,
        offsets: &BTreeMap<(String, i32), Position>,
        note: &note::CommitNote,
    ) -> riffle::Result<()> {
        txn.producer
            .flush(TIMEOUT)
            .map_err(|e| kafka_error(format!("cannot flush `{}`", txn.id), e))?;
        crate::sink::delivery_failure(txn.producer.context(), &txn.id)?;
        if !offsets.is_empty() {
            let metadata = note.to_metadata();
            let mut tpl = TopicPartitionList::new();
            for ((topic, partition), position) in offsets {
                tpl.add_partition_offset(topic, *partition, Offset::Offset(position.next))
                    .map_err(|e| kafka_error("bad offset", e))?;
                // Who committed it (what `status` reports as the partition's owner), and the
                // snapshot that holds the partition's state at this offset.
                if let Some(mut element) = tpl.find_partition(topic, *partition) {
                    element.set_metadata(metadata.as_str());
                }
            }
            let metadata = self.inner.member.group_metadata().ok_or_else(|| {
                kafka_failure(
                    ConnectorErrorKind::Retriable,
                    format!("consumer group `{}`", self.inner.name),
                    "no group metadata yet",
                )
            })?;
            txn.producer
                .send_offsets_to_transaction(&tpl, &metadata, TIMEOUT)
                .map_err(|e| {
                    if is_rebalance(&e) {
                        // The coordinator moved on to a new generation: an ordinary rebalance
                        // whose callback has not reached this member yet.
                        return self.rebalanced_error();
                    }
                    kafka_error(
                        format!("cannot send the offsets to the transaction of `{}`", txn.id),
                        e,
                    )
                })?;
        }
        txn.producer
            .commit_transaction(TIMEOUT)
            .map_err(|e| kafka_error(format!("cannot commit the transaction of `{}`", txn.id), e))
    }
}

/// Whether `e` says the group moved to another generation than the one this member committed
/// with (a rebalance), rather than that something failed.
fn is_rebalance(e: &rdkafka::error::KafkaError) -> bool {
    use rdkafka::error::RDKafkaErrorCode as Code;
    matches!(
        e.rdkafka_error_code(),
        Some(
            Code::IllegalGeneration
                | Code::UnknownMemberId
                | Code::RebalanceInProgress
                | Code::FencedMemberEpoch
                | Code::StaleMemberEpoch
        )
    )
}

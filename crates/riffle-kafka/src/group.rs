//! A job as a group of identical processes (issue 17; the design is `docs/scale-out.md`).
//!
//! The same program, started N times with one group name, forms one job. Kafka's consumer-group
//! protocol decides which process reads which partitions of the source topics (KIP-848 by default,
//! the classic protocol with cooperative-sticky assignment as an option); nothing of Riffle's own
//! coordinates the processes.
//!
//! Exactly-once across processes is one Kafka transaction per commit and process: every sink of
//! the process writes through the group's transactional producers ([`KafkaSink::in_group`]), and
//! when a checkpoint completes the source offsets it stored are sent to the transaction
//! (`send_offsets_to_transaction`, with the member's group metadata) before it commits. The
//! committed offsets are the only record of progress: a run never restores from checkpoint
//! storage, it starts at the committed offsets. A transaction that did not commit did not
//! happen: its offsets did not move, so its input is read again.
//!
//! A change of assignment ends the process's run. When partitions are revoked, the revocation
//! callback takes the commit lock, so no commit of the old run can happen once Kafka hands a
//! partition to another process. [`run_in_group`] then aborts what the run left open and starts
//! a new run on the new assignment. A process that is not a member any more (its session
//! expired) is fenced by the broker: its offsets cannot commit, so neither can its outputs.
//!
//! This first version carries stateless jobs (sources, maps, filters, sinks): keyed state across
//! processes needs the Kafka shuffle and snapshots named by the committed offsets
//! (`docs/scale-out.md`).
//!
//! [`KafkaSink::in_group`]: crate::KafkaSink::in_group
//!
//! ```no_run
//! use riffle::StreamEnv;
//! use riffle_kafka::{KafkaConnection, KafkaGroup, KafkaSink, KafkaSource, run_in_group};
//! let kafka = KafkaConnection::new("127.0.0.1:9092");
//! let group = KafkaGroup::join(kafka.clone(), "clicks-etl", ["clicks"]).unwrap();
//! run_in_group(&group, |group| {
//!     let env = StreamEnv::new();
//!     env.from_source(KafkaSource::<serde_json::Value>::json(kafka.clone(), ["clicks"]).in_group(group))
//!         .sink(KafkaSink::json(kafka.clone(), "clicks-copy").exactly_once().in_group(group));
//!     Ok(env)
//! })
//! .unwrap();
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use riffle::{ConnectorErrorKind, StreamEnv};

use crate::sink::Deliveries;
use crate::{KafkaConnection, kafka_error, kafka_failure};

/// How long an open transaction of a group's producer may stay open before the broker aborts it:
/// what a SIGKILLed process leaves open holds `read_committed` readers back this long at most.
const TRANSACTION_TIMEOUT_MS: &str = "10000";
/// Time allowed to broker calls of the group (begin, send offsets, commit, abort).
const TIMEOUT: Duration = Duration::from_secs(30);
/// Transactional producers of a process: one collects the records after the last barrier, one
/// or two wait for their checkpoint to complete.
const POOL: usize = 3;
/// An assignment must hold this long before a run starts on it (members join one by one).
const SETTLE: Duration = Duration::from_millis(500);

/// The group membership protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupProtocol {
    /// KIP-848 (`group.protocol=consumer`), the protocol of Kafka 4: the broker assigns, and a
    /// rebalance moves only the partitions that change owner. Session timeout and heartbeat
    /// interval are broker settings (`group.consumer.session.timeout.ms`).
    Consumer,
    /// The classic protocol with cooperative-sticky assignment, for brokers before 4.0; the
    /// session timeout is the client's `session.timeout.ms` (set it with
    /// [`KafkaConnection::set`]).
    Classic,
}

/// What the membership callbacks maintain.
#[derive(Default)]
struct Membership {
    assignment: BTreeSet<(String, i32)>,
    /// Bumped at every change of assignment.
    generation: u64,
    /// When the assignment last changed.
    changed: Option<Instant>,
}

/// The context of the member consumer: it follows the assignment, pauses what it is given
/// (the data is read by the job's own readers), and takes the commit lock on revocation.
struct MemberContext {
    membership: Arc<Mutex<Membership>>,
    transactions: Arc<Mutex<Transactions>>,
    generation: Arc<AtomicU64>,
}

impl ClientContext for MemberContext {}

impl ConsumerContext for MemberContext {
    fn pre_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            // No commit of the current run once this returns: a commit in progress finishes
            // first (it holds the lock), a later one sees the new generation and fails.
            let _commits = self.transactions.lock().expect("transactions lock");
            let mut membership = self.membership.lock().expect("membership lock");
            for p in tpl.elements() {
                membership
                    .assignment
                    .remove(&(p.topic().to_string(), p.partition()));
            }
            self.bump(&mut membership);
            tracing::info!(
                revoked = tpl.count(),
                generation = membership.generation,
                "group: partitions revoked"
            );
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                if let Err(e) = consumer.pause(tpl) {
                    tracing::warn!(error = %e, "group: cannot pause the member's partitions");
                }
                let mut membership = self.membership.lock().expect("membership lock");
                for p in tpl.elements() {
                    membership
                        .assignment
                        .insert((p.topic().to_string(), p.partition()));
                }
                self.bump(&mut membership);
                tracing::info!(
                    assigned = tpl.count(),
                    generation = membership.generation,
                    "group: partitions assigned"
                );
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(e) => tracing::warn!(error = %e, "group: rebalance error"),
        }
    }
}

impl MemberContext {
    fn bump(&self, membership: &mut Membership) {
        membership.generation += 1;
        membership.changed = Some(Instant::now());
        self.generation
            .store(membership.generation, Ordering::Release);
    }
}

/// One transaction of the process, on a producer of the pool.
struct Open {
    producer: Arc<BaseProducer<Deliveries>>,
    id: String,
}

/// The process's transactional producers and the offsets checkpoints recorded.
#[derive(Default)]
struct Transactions {
    free: Vec<Open>,
    /// Open transactions by the barrier after which their records were written (0: the run's
    /// start).
    open: BTreeMap<u64, Open>,
    /// By checkpoint: the next offset of each partition the run reads.
    offsets: BTreeMap<u64, BTreeMap<(String, i32), i64>>,
    /// The last checkpoint committed in this run.
    committed: u64,
    /// The generation the current run started at.
    run: u64,
    /// Producers created (names the next one's transactional id).
    created: usize,
}

/// Membership of one process in a Kafka consumer group, and the process's transactions: what
/// the sources, sinks and [`run_in_group`] of a process share. Cheap to clone.
///
/// Dropping the last clone leaves the group (the partitions move to the other members at once).
#[derive(Clone)]
pub struct KafkaGroup {
    inner: Arc<GroupInner>,
}

struct GroupInner {
    name: String,
    kafka: KafkaConnection,
    topics: Vec<String>,
    member: Arc<BaseConsumer<MemberContext>>,
    membership: Arc<Mutex<Membership>>,
    transactions: Arc<Mutex<Transactions>>,
    generation: Arc<AtomicU64>,
    /// The generation the current run started at (what readers compare with).
    run: AtomicU64,
    /// Names this process's transactional ids.
    instance: String,
    stop: Arc<AtomicBool>,
    poller: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for GroupInner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(poller) = self.poller.lock().expect("poller lock").take() {
            let _ = poller.join();
        }
        let transactions = self.transactions.lock().expect("transactions lock");
        for open in transactions.open.values() {
            let _ = open.producer.abort_transaction(TIMEOUT);
        }
    }
}

impl KafkaGroup {
    /// Joins the consumer group `name` for `topics` with the KIP-848 protocol.
    pub fn join<S: Into<String>>(
        kafka: KafkaConnection,
        name: impl Into<String>,
        topics: impl IntoIterator<Item = S>,
    ) -> riffle::Result<KafkaGroup> {
        Self::join_with(kafka, name, topics, GroupProtocol::Consumer)
    }

    /// Joins the consumer group `name` for `topics` with `protocol`.
    pub fn join_with<S: Into<String>>(
        kafka: KafkaConnection,
        name: impl Into<String>,
        topics: impl IntoIterator<Item = S>,
        protocol: GroupProtocol,
    ) -> riffle::Result<KafkaGroup> {
        let name = name.into();
        let topics: Vec<String> = topics.into_iter().map(Into::into).collect();
        if name.trim().is_empty() {
            return Err(riffle::Error::config("group", "a group needs a name"));
        }
        if topics.is_empty() || topics.iter().any(|t| t.trim().is_empty()) {
            return Err(riffle::Error::config(
                "topics",
                "a group needs at least one topic name",
            ));
        }
        kafka.validate("kafka")?;
        let membership = Arc::new(Mutex::new(Membership::default()));
        let transactions = Arc::new(Mutex::new(Transactions::default()));
        let generation = Arc::new(AtomicU64::new(0));
        let mut config = kafka.client_config_with(&[("isolation.level", "read_committed")]);
        config
            .set("group.id", &name)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false");
        match protocol {
            GroupProtocol::Consumer => config.set("group.protocol", "consumer"),
            GroupProtocol::Classic => config
                .set("group.protocol", "classic")
                .set("partition.assignment.strategy", "cooperative-sticky"),
        };
        let member: BaseConsumer<MemberContext> = config
            .create_with_context(MemberContext {
                membership: membership.clone(),
                transactions: transactions.clone(),
                generation: generation.clone(),
            })
            .map_err(|e| kafka_error(format!("cannot join the consumer group `{name}`"), e))?;
        let subscribed: Vec<&str> = topics.iter().map(String::as_str).collect();
        member
            .subscribe(&subscribed)
            .map_err(|e| kafka_error(format!("cannot subscribe group `{name}`"), e))?;
        let member = Arc::new(member);
        let stop = Arc::new(AtomicBool::new(false));
        let poller = {
            let (member, stop) = (member.clone(), stop.clone());
            std::thread::Builder::new()
                .name(format!("group {name}"))
                .spawn(move || {
                    while !stop.load(Ordering::Acquire) {
                        // Drives the protocol; the partitions are paused, so nothing is fetched.
                        if let Some(Err(e)) = member.poll(Duration::from_millis(100)) {
                            tracing::warn!(error = %e, "group member");
                        }
                    }
                })
                .map_err(|e| riffle::Error::io("cannot start the group's thread", e))?
        };
        let instance = format!(
            "{:016x}",
            riffle::keys::stable_hash(&(
                std::process::id() as u64,
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0)
            ))
        );
        Ok(KafkaGroup {
            inner: Arc::new(GroupInner {
                name,
                kafka,
                topics,
                member,
                membership,
                transactions,
                generation,
                run: AtomicU64::new(u64::MAX),
                instance,
                stop,
                poller: Mutex::new(Some(poller)),
            }),
        })
    }

    /// The group's name (the consumer group id).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The topics the group reads.
    pub fn topics(&self) -> &[String] {
        &self.inner.topics
    }

    /// The partitions this process owns now, as (topic, partition).
    pub fn assignment(&self) -> Vec<(String, i32)> {
        let membership = self.inner.membership.lock().expect("membership lock");
        membership.assignment.iter().cloned().collect()
    }

    /// Bumped at every change of this process's assignment.
    pub fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::Acquire)
    }

    /// Whether the assignment changed since the current run started.
    pub(crate) fn rebalanced(&self) -> bool {
        self.generation() != self.inner.run.load(Ordering::Acquire)
    }

    /// The error a run ends with when the group moved partitions.
    pub(crate) fn rebalanced_error(&self) -> riffle::Error {
        kafka_failure(
            ConnectorErrorKind::Retriable,
            format!("consumer group `{}`", self.inner.name),
            "rebalanced: the run ends and starts again on the new assignment",
        )
    }

    /// Waits until this process owns partitions and its assignment held still for a moment;
    /// returns the generation.
    fn wait_for_assignment(&self) -> u64 {
        loop {
            {
                let membership = self.inner.membership.lock().expect("membership lock");
                if !membership.assignment.is_empty()
                    && membership.changed.is_some_and(|at| at.elapsed() >= SETTLE)
                {
                    return membership.generation;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts a run at `generation`: what an earlier run left is gone.
    fn begin_run(&self, generation: u64) {
        let mut transactions = self.inner.transactions.lock().expect("transactions lock");
        transactions.run = generation;
        self.inner.run.store(generation, Ordering::Release);
        transactions.committed = 0;
        transactions.offsets.clear();
    }

    /// Aborts every transaction the run left open. A producer that cannot abort (fenced: the
    /// broker aborted its transaction after the timeout while the process was paused) is
    /// dropped; the next run creates a new one.
    fn abort_run(&self) {
        let mut transactions = self.inner.transactions.lock().expect("transactions lock");
        let open = std::mem::take(&mut transactions.open);
        transactions.offsets.clear();
        for (_, txn) in open {
            match txn.producer.abort_transaction(TIMEOUT) {
                Ok(()) => transactions.free.push(txn),
                Err(e) => {
                    tracing::warn!(transactional_id = %txn.id, error = %e, "group: cannot abort a transaction; the producer is replaced");
                }
            }
        }
    }

    /// A source reader of the run records where partition (topic, partition) stands at
    /// checkpoint `checkpoint`.
    pub(crate) fn record_offset(&self, checkpoint: u64, topic: &str, partition: i32, next: i64) {
        let mut transactions = self.inner.transactions.lock().expect("transactions lock");
        transactions
            .offsets
            .entry(checkpoint)
            .or_default()
            .insert((topic.to_string(), partition), next);
    }

    /// The producer of the transaction that collects the records written after barrier
    /// `epoch` (0: the run's start), beginning it if needed.
    pub(crate) fn producer(&self, epoch: u64) -> riffle::Result<Arc<BaseProducer<Deliveries>>> {
        let mut transactions = self.inner.transactions.lock().expect("transactions lock");
        self.open(&mut transactions, epoch)
            .map(|txn| txn.producer.clone())
    }

    fn open<'a>(
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

    fn new_producer(&self, slot: usize) -> riffle::Result<Open> {
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
        if self.generation() != transactions.run {
            return Err(self.rebalanced_error());
        }
        let later = transactions.open.split_off(&checkpoint);
        let due = std::mem::replace(&mut transactions.open, later);
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
        let result = self.commit_transaction(&txn, &offsets);
        // A producer whose transaction could neither commit nor abort is dropped.
        if result.is_ok() || txn.producer.abort_transaction(TIMEOUT).is_ok() {
            transactions.free.push(txn);
        }
        result?;
        transactions.committed = checkpoint;
        Ok(())
    }

    fn commit_transaction(
        &self,
        txn: &Open,
        offsets: &BTreeMap<(String, i32), i64>,
    ) -> riffle::Result<()> {
        txn.producer
            .flush(TIMEOUT)
            .map_err(|e| kafka_error(format!("cannot flush `{}`", txn.id), e))?;
        crate::sink::delivery_failure(txn.producer.context(), &txn.id)?;
        if !offsets.is_empty() {
            let mut tpl = TopicPartitionList::new();
            for ((topic, partition), next) in offsets {
                tpl.add_partition_offset(topic, *partition, Offset::Offset(*next))
                    .map_err(|e| kafka_error("bad offset", e))?;
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

/// Runs a job as one member of `group`, until it ends: waits for an assignment, builds the job
/// with `build` (its Kafka sources and sinks in the group: [`KafkaSource::in_group`],
/// [`KafkaSink::in_group`]), runs it, and when the group moves partitions, aborts what the run
/// left uncommitted and runs it again on the new assignment, from the committed offsets.
///
/// A run never restores from the job's checkpoints: after a failure, the job's restart strategy
/// (`EnvConfig::checkpoints.restart`) applies here, and the next run starts from the committed
/// offsets, since the checkpoints after them did not commit. The job needs a checkpoint interval
/// (commits happen at checkpoints), and no restore setting; both are checked at start.
///
/// [`KafkaSource::in_group`]: crate::KafkaSource::in_group
/// [`KafkaSink::in_group`]: crate::KafkaSink::in_group
pub fn run_in_group(
    group: &KafkaGroup,
    mut build: impl FnMut(&KafkaGroup) -> riffle::Result<StreamEnv>,
) -> riffle::Result<riffle::JobResult> {
    let (mut failures, mut backoff) = (0u32, None);
    loop {
        let generation = group.wait_for_assignment();
        group.begin_run(generation);
        tracing::info!(group = group.name(), generation, partitions = ?group.assignment(), "group: run starts");
        let env = build(group)?;
        let config = env.config();
        if config.checkpoints.interval.is_none() {
            return Err(riffle::Error::config(
                "checkpoints.interval",
                "a job in a process group commits at checkpoints: it needs a checkpoint interval",
            ));
        }
        if config.checkpoints.restore.is_some() {
            return Err(riffle::Error::config(
                "checkpoints.restore",
                "a job in a process group resumes from its group's committed offsets, not from a checkpoint",
            ));
        }
        let restart = config.checkpoints.restart;
        env.configure(|c| c.checkpoints.restart = riffle::checkpoint::RestartStrategy::None);
        let started = Instant::now();
        let result = env.execute();
        let rebalanced = group.generation() != generation;
        group.abort_run();
        match result {
            _ if rebalanced => {
                tracing::info!(
                    group = group.name(),
                    "group: the assignment changed; the run starts again"
                );
            }
            Ok(result) => return Ok(result),
            Err(e) => {
                failures += 1;
                let Some(delay) = restart.next_delay(failures, started.elapsed(), &mut backoff)
                else {
                    return Err(e);
                };
                tracing::warn!(group = group.name(), error = %e, attempt = failures, "group: the run failed; it starts again from the committed offsets");
                std::thread::sleep(delay);
            }
        }
    }
}

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
//! Keyed state moves with its partitions: each commit's metadata names the snapshot holding its
//! partition's state at that offset ([`note`]), and a new run composes the snapshots its
//! partitions name into one restore ([`restore`]; a named snapshot that is gone makes the member
//! wait for it or for an operator's acceptance of the loss, never exit and crash-loop). What no
//! commit names any more is cleaned ([`cleanup`]: only runs provably dead and unnamed). Every
//! member must run the same job: commits carry the job's fingerprint, and a member with another
//! job fails at start naming the difference ([`job`]). A member whose checkpoints keep failing
//! leaves the group, so that its partitions move (`checkpoints.tolerable_failed_checkpoints`).
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
use riffle::checkpoint::{CheckpointStorage, RetentionFloor, checkpoint_dir};
use riffle::{ConnectorErrorKind, JobFingerprint, StreamEnv};
use serde::{Deserialize, Serialize};

use crate::sink::Deliveries;
use crate::{KafkaConnection, kafka_error, kafka_failure};

mod cleanup;
mod describe;
mod job;
mod legacy;
mod note;
mod restore;
mod standby;

pub use restore::{MissingState, accept_state_loss, reported_missing_state};

/// How long an open transaction of a group's producer may stay open before the broker aborts it:
/// what a SIGKILLed process leaves open holds `read_committed` readers back this long at most.
const TRANSACTION_TIMEOUT_MS: &str = "10000";
/// Time allowed to broker calls of the group (begin, send offsets, commit, abort).
const TIMEOUT: Duration = Duration::from_secs(30);
/// Transactional producers of a process: one collects the records after the last barrier, one
/// or two wait for their checkpoint to complete.
const POOL: usize = 3;
/// How long one poll for the reports of the records an abort purges waits.
const REPORTS_POLL: Duration = Duration::from_millis(20);
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

impl Open {
    /// Aborts the transaction, and the producer forgets the aborted transaction's delivery
    /// failures. librdkafka purges what is still queued or in flight and waits for the purged
    /// records' reports before it aborts: a thread serves them meanwhile (nothing else polls
    /// the producer once its run ended).
    fn abort(&self) -> rdkafka::error::KafkaResult<()> {
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
struct Transactions {
    free: Vec<Open>,
    /// Open transactions by the barrier after which their records were written (0: the run's
    /// start).
    open: BTreeMap<u64, Open>,
    /// By checkpoint: the next offset of each partition the run reads, and what else its reader
    /// needs to resume there (a shuffle partition's producer clocks).
    offsets: BTreeMap<u64, BTreeMap<(String, i32), Position>>,
    /// The last checkpoint committed in this run.
    committed: u64,
    /// The generation the current run started at.
    run: u64,
    /// Producers created (names the next one's transactional id).
    created: usize,
    /// Where the run's snapshots are named by the offsets they were taken at.
    state: Option<RunState>,
}

/// The run's checkpoint storage, seen from its root (shared by the group's processes), and what
/// its commits say.
struct RunState {
    storage: CheckpointStorage,
    /// The run's job directory under the root.
    job: String,
    /// The run's job, checked against the group's commits before its first commit.
    fingerprint: JobFingerprint,
    /// Whether that check was done.
    checked: bool,
    /// What the run's retention keeps: from the checkpoint its last commit names on.
    floor: RetentionFloor,
}

/// Where a partition's reader stood at a checkpoint.
#[derive(Clone, Debug)]
struct Position {
    next: i64,
    /// What the reader needs besides the offset to resume there (kept beside the snapshot).
    reader: Option<serde_json::Value>,
}

/// A run's directory that no committed offset names is removed once nothing was written in it
/// for this long (a live run writes a checkpoint every interval).
const CLEANUP_GRACE: Duration = Duration::from_secs(600);
/// Checkpoints a member's run may fail in a row when the job sets no bound
/// (`checkpoints.tolerable_failed_checkpoints`): then the member leaves the group.
const TOLERABLE_FAILED_CHECKPOINTS: u32 = 5;
/// How often a member whose partitions' state is missing looks again.
const MISSING_STATE_RETRY: Duration = Duration::from_secs(5);

/// Membership of one process in a Kafka consumer group, and the process's transactions: what
/// the sources, sinks and [`run_in_group`] of a process share. Cheap to clone.
///
/// Dropping the last clone leaves the group (the partitions move to the other members at once).
#[derive(Clone)]
pub struct KafkaGroup {
    inner: Arc<GroupInner>,
}

impl std::fmt::Debug for KafkaGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaGroup")
            .field("name", &self.inner.name)
            .field("topics", &self.inner.topics)
            .field("generation", &self.generation())
            .finish()
    }
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
    /// The topics whose partitions carry keyed state (a Kafka shuffle's repartition topics);
    /// empty: every topic of the group does.
    keyed: Mutex<BTreeSet<String>>,
    /// Where the readers of the current run's partitions stood at their committed offsets.
    restored: Mutex<BTreeMap<(String, i32), serde_json::Value>>,
    /// Names this process's transactional ids.
    instance: String,
    /// Who this member is, in the metadata of the offsets it commits: `host/pid/instance`.
    label: String,
    /// How long a run's directory must have been left unwritten before a clean-up removes it
    /// (ms; [`KafkaGroup::set_cleanup_grace`]).
    cleanup_grace: AtomicU64,
    /// Warm copies of other members' partitions ([`KafkaGroup::set_standby_replicas`]).
    standby: standby::Standby,
    /// The partitions whose committed state is missing, while this member waits for it.
    missing: Mutex<Vec<MissingState>>,
    /// The fingerprint of the job this member's replaces ([`KafkaGroup::set_upgrade_from`]).
    upgrade_from: Mutex<Option<String>>,
    /// This member's runs so far (names and orders them: `Registration::seq`).
    runs: AtomicU64,
    /// The member left the group (its checkpoints kept failing); it joins again at the next
    /// [`run_in_group`].
    left: AtomicBool,
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
            let _ = open.abort();
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
        let label = format!("{}/{}/{instance}", host_name(), std::process::id());
        let mut config = kafka.client_config_with(&[("isolation.level", "read_committed")]);
        config
            .set("group.id", &name)
            // The coordinator names the member as its commits do (`describe_members`).
            .set("client.id", &label)
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
                keyed: Mutex::new(BTreeSet::new()),
                restored: Mutex::new(BTreeMap::new()),
                label,
                cleanup_grace: AtomicU64::new(CLEANUP_GRACE.as_millis() as u64),
                standby: standby::Standby::default(),
                missing: Mutex::new(Vec::new()),
                upgrade_from: Mutex::new(None),
                runs: AtomicU64::new(0),
                left: AtomicBool::new(false),
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

    /// Who this member is: `host/pid/instance`, in the metadata of the offsets it commits.
    pub fn member(&self) -> &str {
        &self.inner.label
    }

    /// The group's committed offset of every partition of its topics (with the metadata each
    /// commit carries).
    fn committed_everywhere(&self) -> riffle::Result<TopicPartitionList> {
        let mut tpl = TopicPartitionList::new();
        for topic in &self.inner.topics {
            for partition in 0..self.partition_count(topic)? as i32 {
                tpl.add_partition(topic, partition);
            }
        }
        self.inner
            .member
            .committed_offsets(tpl, TIMEOUT)
            .map_err(|e| kafka_error("cannot read the group's committed offsets", e))
    }

    /// Where the group stands, from the brokers: every partition of its topics with its
    /// committed offset, end offset, lag and the member that committed it last (members, and
    /// which partitions each owns, as of their last commits), and what this member owns now.
    /// What `/api/v1/group` serves (`riffle demo --kafka B --group NAME`).
    pub fn status(&self) -> riffle::Result<GroupReport> {
        let committed = self.committed_everywhere()?;
        let mut report = GroupReport {
            group: self.inner.name.clone(),
            member: self.inner.label.clone(),
            generation: self.generation(),
            owned: self
                .assignment()
                .into_iter()
                .map(|(topic, partition)| format!("{topic}-{partition}"))
                .collect(),
            partitions: Vec::new(),
            members: BTreeMap::new(),
            assigned: BTreeMap::new(),
            lag: BTreeMap::new(),
            standby: Vec::new(),
            standby_bytes: 0,
            missing_state: self.missing_state(),
        };
        // Brokers that cannot describe the group leave it empty: the commits still tell.
        match self.describe_members() {
            Ok(assigned) => report.assigned = assigned,
            Err(e) => tracing::debug!(group = %self.inner.name, error = %e, "group: not described"),
        }
        (report.standby, report.standby_bytes) = self.standby_status();
        for element in committed.elements() {
            let (topic, partition) = (element.topic(), element.partition());
            let (_, end) = self
                .inner
                .member
                .fetch_watermarks(topic, partition, TIMEOUT)
                .map_err(|e| {
                    kafka_error(format!("cannot read the offsets of {topic}-{partition}"), e)
                })?;
            let committed = match element.offset() {
                Offset::Offset(offset) => Some(offset),
                _ => None,
            };
            // Nothing committed yet: all of the partition is still to read.
            let lag = (end - committed.unwrap_or(0)).max(0);
            let by = Some(note::committer(element.metadata())).filter(|m| !m.is_empty());
            if let Some(by) = &by {
                report
                    .members
                    .entry(by.clone())
                    .or_default()
                    .push(format!("{topic}-{partition}"));
            }
            *report.lag.entry(topic.to_string()).or_default() += lag;
            report.partitions.push(PartitionReport {
                topic: topic.to_string(),
                partition,
                committed,
                end,
                lag,
                committed_by: by,
            });
        }
        Ok(report)
    }

    /// How long a run's job directory must have been left unwritten before the clean-up at
    /// the start of a run removes it, if no committed offset names a snapshot in it (default
    /// 10 minutes). Keep it well above the checkpoint interval: a live run's directory is
    /// known by its recent writes.
    pub fn set_cleanup_grace(&self, grace: Duration) {
        self.inner
            .cleanup_grace
            .store(grace.as_millis() as u64, Ordering::Relaxed);
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
            ConnectorErrorKind::Reassigned,
            format!("consumer group `{}`", self.inner.name),
            "rebalanced: the run ends and starts again on the new assignment",
        )
    }

    /// Waits up to `wait`, or less if the assignment changes from `generation`.
    fn wait_for_change(&self, generation: u64, wait: Duration) {
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline && self.generation() == generation {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Leaves the group (its partitions move to the other members at once); the next
    /// [`run_in_group`] joins again.
    fn leave(&self) {
        self.inner.left.store(true, Ordering::Release);
        self.inner.member.unsubscribe();
        let mut membership = self.inner.membership.lock().expect("membership lock");
        membership.assignment.clear();
    }

    /// Joins the group again after [`leave`](Self::leave).
    fn rejoin(&self) -> riffle::Result<()> {
        if !self.inner.left.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let topics: Vec<&str> = self.inner.topics.iter().map(String::as_str).collect();
        self.inner
            .member
            .subscribe(&topics)
            .map_err(|e| kafka_error(format!("cannot subscribe group `{}`", self.inner.name), e))
    }

    /// The partitions whose committed state this member cannot find, while it waits for it
    /// (empty otherwise).
    pub fn missing_state(&self) -> Vec<MissingState> {
        self.inner.missing.lock().expect("missing lock").clone()
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
    fn begin_run(&self, generation: u64, state: Option<RunState>) {
        let mut transactions = self.inner.transactions.lock().expect("transactions lock");
        transactions.state = state;
        transactions.run = generation;
        self.inner.run.store(generation, Ordering::Release);
        transactions.committed = 0;
        transactions.offsets.clear();
        if transactions.state.is_none() {
            self.inner.restored.lock().expect("restored lock").clear();
        }
    }

    /// Aborts every transaction the run left open. A producer that cannot abort (fenced: the
    /// broker aborted its transaction after the timeout while the process was paused) is
    /// dropped; the next run creates a new one.
    fn abort_run(&self) {
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

    /// What the reader of (topic, partition) recorded with the offset this run starts at.
    pub(crate) fn restored_reader(&self, topic: &str, partition: i32) -> Option<serde_json::Value> {
        let restored = self.inner.restored.lock().expect("restored lock");
        restored.get(&(topic.to_string(), partition)).cloned()
    }

    /// Says that `topic`'s partitions carry keyed state (a repartition topic: partition `P`
    /// holds the key groups of subtask `P`). Once a topic is named, the others carry none;
    /// while none is, every topic of the group does.
    pub(crate) fn carries_keyed_state(&self, topic: &str) {
        let mut keyed = self.inner.keyed.lock().expect("keyed lock");
        keyed.insert(topic.to_string());
    }

    /// Whether `topic`'s partitions carry keyed state.
    fn keyed(&self, topic: &str) -> bool {
        let keyed = self.inner.keyed.lock().expect("keyed lock");
        keyed.is_empty() || keyed.contains(topic)
    }

    /// The producer indices of the records a shuffle writer subtask writes in this run, and
    /// their count: a producer is a partition of the group's topics that carry no keyed state
    /// (the source topics), numbered over all of them, topic by topic; subtask `subtask` of
    /// `parallelism` writes for the partitions this process owns and the Kafka source gives that
    /// subtask.
    pub(crate) fn producers(
        &self,
        subtask: usize,
        parallelism: usize,
    ) -> riffle::Result<(Vec<u32>, u32)> {
        let keyed = self.inner.keyed.lock().expect("keyed lock").clone();
        let sources: Vec<&String> = self
            .inner
            .topics
            .iter()
            .filter(|t| !keyed.contains(*t))
            .collect();
        let mut first = BTreeMap::new();
        let mut count = 0usize;
        for topic in sources {
            first.insert(topic.clone(), count);
            count += self.partition_count(topic)?;
        }
        let mut mine = Vec::new();
        for (topic, partition) in self.assignment() {
            let Some(start) = first.get(&topic) else {
                continue;
            };
            let split = crate::KafkaPartition {
                topic: topic.clone(),
                partition,
            };
            if crate::source::partition_owner(&split, parallelism) == subtask {
                mine.push((start + partition as usize) as u32);
            }
        }
        Ok((mine, count as u32))
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
    fn before_commit(
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
    fn write_readers(
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

    /// How long a dead run's directory must have been left unwritten before a clean-up removes
    /// it.
    fn cleanup_grace(&self) -> Duration {
        Duration::from_millis(self.inner.cleanup_grace.load(Ordering::Relaxed))
    }

    fn partition_count(&self, topic: &str) -> riffle::Result<usize> {
        let metadata = self
            .inner
            .member
            .fetch_metadata(Some(topic), TIMEOUT)
            .map_err(|e| kafka_error(format!("cannot read the partitions of `{topic}`"), e))?;
        Ok(metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .map(|t| t.partitions().len())
            .unwrap_or(0))
    }

    fn commit_transaction(
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
    build: impl FnMut(&KafkaGroup) -> riffle::Result<StreamEnv>,
) -> riffle::Result<riffle::JobResult> {
    run_in_group_with(group, build, StreamEnv::execute)
}

/// [`run_in_group`], with each run executed by `execute` (which runs the environment to its
/// end: `StreamEnv::execute`, or a loop over `execute_async` that shows progress and stops the
/// job on Ctrl-C). A run that `execute` ends with `Ok` ends the group's job.
pub fn run_in_group_with(
    group: &KafkaGroup,
    mut build: impl FnMut(&KafkaGroup) -> riffle::Result<StreamEnv>,
    mut execute: impl FnMut(&StreamEnv) -> riffle::Result<riffle::JobResult>,
) -> riffle::Result<riffle::JobResult> {
    let (mut failures, mut backoff) = (0u32, None);
    group.rejoin()?;
    loop {
        let generation = group.wait_for_assignment();
        group.begin_run(generation, None);
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
        let location = config.checkpoints.storage.clone();
        let open = || {
            CheckpointStorage::open(
                &location,
                &config.checkpoints.storage_options,
                "",
                "checkpoints.storage",
            )
            .map(|storage| storage.with_warm_files(group.warm_files()))
        };
        let storage = open()?;
        // One group, one job: a member with another job is refused before it restores anything.
        let fingerprint = group.job_fingerprint(&env)?;
        group.check_job(&storage, &fingerprint)?;
        // Each run's snapshots in their own directory of the shared storage (checkpoint ids
        // start again at 1 in every run, and commits name snapshots by directory and id).
        let seq = group.inner.runs.fetch_add(1, Ordering::AcqRel) + 1;
        let job = format!(
            "{}-{}-{generation}-{seq}",
            config.job_name, group.inner.instance
        );
        let restore =
            match group.compose_restore(&storage, &location, &job, config.max_parallelism)? {
                restore::Composed::Ready(restore) => restore,
                restore::Composed::Missing(missing) => {
                    // Never exit (a replacement would fail the same way): wait for the state,
                    // a new assignment, or an operator's acceptance of the loss.
                    group.report_missing(&storage, &missing);
                    group.wait_for_change(generation, MISSING_STATE_RETRY);
                    continue;
                }
            };
        group.clean_up_in_background(open()?, job.clone(), seq);
        let every = config
            .checkpoints
            .interval
            .unwrap_or(Duration::from_secs(1));
        group.start_standby(open()?, config.max_parallelism, every);
        let warm_files = group.warm_files();
        let floor = RetentionFloor::new();
        let tolerable = config
            .checkpoints
            .tolerable_failed_checkpoints
            .unwrap_or(TOLERABLE_FAILED_CHECKPOINTS);
        env.configure(|c| {
            c.checkpoints.warm_files = warm_files;
            c.job_name = job.clone();
            c.checkpoints.restart = riffle::checkpoint::RestartStrategy::None;
            c.checkpoints.restore = restore;
            c.checkpoints.retention_floor = Some(floor.clone());
            c.checkpoints.tolerable_failed_checkpoints = Some(tolerable);
        });
        group.begin_run(
            generation,
            Some(RunState {
                storage,
                job,
                fingerprint,
                checked: false,
                floor,
            }),
        );
        let started = Instant::now();
        let result = execute(&env);
        let reassigned = result
            .as_ref()
            .err()
            .and_then(riffle::Error::connector_kind)
            == Some(ConnectorErrorKind::Reassigned);
        let rebalanced = group.generation() != generation;
        group.abort_run();
        match result {
            _ if rebalanced || reassigned => {
                tracing::info!(
                    group = group.name(),
                    "group: the assignment changed; the run starts again"
                );
                if !rebalanced {
                    // The coordinator said so first: its callback is on its way.
                    group.wait_for_change(generation, SETTLE);
                }
            }
            Ok(result) => return Ok(result),
            // A different job, a bad setting: no restart can help.
            Err(e @ riffle::Error::Config { .. }) => return Err(e),
            Err(e @ riffle::Error::TooManyFailedCheckpoints { .. }) => {
                // Its partitions must move to members that can commit them.
                tracing::error!(group = group.name(), error = %e, "group: this member cannot checkpoint; it leaves the group, so that its partitions move");
                group.leave();
                return Err(e);
            }
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

/// Where a process group stands: [`KafkaGroup::status`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GroupReport {
    /// The group's name.
    pub group: String,
    /// This member (`host/pid/instance`).
    pub member: String,
    /// This member's assignment generation (bumped at every change).
    pub generation: u64,
    /// The partitions this member owns now, as `topic-partition`.
    pub owned: Vec<String>,
    /// Every partition of the group's topics.
    pub partitions: Vec<PartitionReport>,
    /// The members that committed offsets, with the partitions they committed last.
    pub members: BTreeMap<String, Vec<String>>,
    /// The group's live members as its coordinator knows them (DescribeConsumerGroups), with
    /// the partitions assigned to each now: members that own nothing or have not committed
    /// yet too. Empty when the brokers could not describe the group.
    #[serde(default)]
    pub assigned: BTreeMap<String, Vec<String>>,
    /// Records still to read, by topic (end offset minus committed offset, summed).
    pub lag: BTreeMap<String, i64>,
    /// The partitions whose state this member keeps warm for others
    /// ([`KafkaGroup::set_standby_replicas`]), as `topic-partition`.
    #[serde(default)]
    pub standby: Vec<String>,
    /// The bytes of state it holds for them.
    #[serde(default)]
    pub standby_bytes: u64,
    /// The partitions whose committed state this member cannot find: it waits, until the
    /// state is back or an operator accepts its loss (`riffle group accept-state-loss`).
    #[serde(default)]
    pub missing_state: Vec<MissingState>,
}

/// One partition of a process group's topics.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PartitionReport {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The group's committed offset (none yet: `None`).
    pub committed: Option<i64>,
    /// The partition's end offset (transaction markers included).
    pub end: i64,
    /// `end - committed`.
    pub lag: i64,
    /// The member whose commit it is.
    pub committed_by: Option<String>,
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

/// This machine's name, for a member's label.
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// Where the readers of a group's partitions stood at their committed offsets, by (topic,
/// partition), as the checkpoints their commits name hold it.
type ReaderPositions = BTreeMap<(String, i32), serde_json::Value>;

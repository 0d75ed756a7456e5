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
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::TopicPartitionList;
use rdkafka::consumer::{BaseConsumer, Consumer};
use riffle::ConnectorErrorKind;

use crate::{KafkaConnection, kafka_error, kafka_failure};

mod cleanup;
mod describe;
mod job;
mod legacy;
mod membership;
mod note;
mod restore;
mod run;
mod standby;
mod status;
mod transactions;

pub use restore::{MissingState, accept_state_loss, reported_missing_state};
pub use run::{run_in_group, run_in_group_with};
pub use status::{GroupReport, PartitionReport};

use membership::{MemberContext, Membership};
use transactions::{RunState, Transactions};

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

    /// How long a dead run's directory must have been left unwritten before a clean-up removes
    /// it.
    fn cleanup_grace(&self) -> Duration {
        Duration::from_millis(self.inner.cleanup_grace.load(Ordering::Relaxed))
    }

    pub(crate) fn partition_count(&self, topic: &str) -> riffle::Result<usize> {
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

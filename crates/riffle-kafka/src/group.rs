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

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use riffle::checkpoint::{CheckpointStorage, Manifest, ManifestPart, RestoreFrom, checkpoint_dir};
use riffle::keys::KeyGroupRange;
use riffle::{ConnectorErrorKind, StreamEnv};
use serde::{Deserialize, Serialize};

use crate::sink::Deliveries;
use crate::{KafkaConnection, kafka_error, kafka_failure};

mod describe;
mod standby;

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

/// The run's checkpoint storage, seen from its root (shared by the group's processes), and the
/// markers written in it.
struct RunState {
    storage: CheckpointStorage,
    /// The run's job directory under the root.
    job: String,
    /// By partition, the offsets of the markers written, oldest first.
    markers: BTreeMap<(String, i32), VecDeque<i64>>,
}

/// What one clean-up of the group's checkpoint storage removed.
#[derive(Debug, Default)]
struct CleanUp {
    markers: usize,
    runs: usize,
}

/// Where a partition's reader stood at a checkpoint.
#[derive(Clone, Debug)]
struct Position {
    next: i64,
    /// What the reader needs besides the offset to resume there (kept in the marker).
    reader: Option<serde_json::Value>,
}

/// What a marker says: the snapshot taken at a partition's committed offset, and where the
/// partition's reader stood.
#[derive(Debug, Serialize, Deserialize)]
struct Marker {
    job: String,
    checkpoint: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reader: Option<serde_json::Value>,
}

/// Markers kept per partition: the committed one and the one before.
const MARKERS_KEPT: usize = 2;
/// A run's directory that no committed offset names is removed once nothing was written in it
/// for this long (a live run writes a checkpoint every interval).
const CLEANUP_GRACE: Duration = Duration::from_secs(600);
/// The file of a marker, in its directory.
const MARKER_FILE: &str = "marker.json";

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
    /// The reader positions the markers of the current run's committed offsets hold.
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
            let by = Some(element.metadata())
                .filter(|m| !m.is_empty())
                .map(str::to_string);
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

    /// Removes from the group's checkpoint storage what no committed offset needs any more:
    /// markers below each partition's committed offset, and the directories of ended runs
    /// (their snapshots and composed restore manifest) that no remaining marker names and
    /// that nothing was written to for the clean-up grace. Runs are known by the entry each
    /// writes under `<group>-runs/` at its start; `current` is this process's run. Errors are
    /// logged, not returned: what is left is removed by a later clean-up.
    fn clean_up(&self, storage: &CheckpointStorage, current: &str) -> riffle::Result<CleanUp> {
        let name = &self.inner.name;
        let grace = Duration::from_millis(self.inner.cleanup_grace.load(Ordering::Relaxed));
        let committed = self.committed_everywhere()?;
        let removed = |dir: &str| match storage.delete_dir(dir) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(group = %name, dir, error = %e, "group: clean-up cannot remove");
                false
            }
        };
        let mut done = CleanUp::default();
        // The runs the markers still name: the committed one's, and those written for a
        // commit still to come.
        let mut named = BTreeSet::new();
        for element in committed.elements() {
            let (topic, partition) = (element.topic(), element.partition());
            let committed = match element.offset() {
                Offset::Offset(offset) => Some(offset),
                _ => None,
            };
            for offset in storage.subdirectories(&format!("{name}-state/{topic}-{partition}"))? {
                let Ok(offset) = offset.parse::<i64>() else {
                    continue;
                };
                let dir = marker_dir(name, topic, partition, offset);
                if committed.is_some_and(|committed| offset < committed) {
                    done.markers += usize::from(removed(&dir));
                } else if let Some(marker) = storage
                    .read_optional(&format!("{dir}/{MARKER_FILE}"))?
                    .and_then(|bytes| serde_json::from_slice::<Marker>(&bytes).ok())
                {
                    named.insert(marker.job);
                }
            }
        }
        let runs = format!("{name}-runs");
        let now = std::time::SystemTime::now();
        for run in storage.subdirectories(&runs)? {
            if run == current || named.contains(&run) {
                continue;
            }
            let entry = format!("{runs}/{run}");
            let written = [storage.last_modified(&run)?, storage.last_modified(&entry)?]
                .into_iter()
                .flatten()
                .max();
            let idle = written
                .and_then(|at| now.duration_since(at).ok())
                .unwrap_or(Duration::MAX);
            if idle < grace {
                continue;
            }
            if removed(&run) && removed(&format!("{name}-restore/{run}")) && removed(&entry) {
                done.runs += 1;
            }
        }
        Ok(done)
    }

    /// Registers run `job` (for the clean-ups of later runs) and cleans up in the background.
    fn clean_up_in_background(&self, storage: CheckpointStorage, job: String) {
        if let Err(e) = storage.write(&format!("{}-runs/{job}/run", self.inner.name), Vec::new()) {
            tracing::warn!(group = %self.inner.name, error = %e, "group: cannot register the run");
            return;
        }
        let group = self.clone();
        let spawned = std::thread::Builder::new()
            .name("riffle-group-cleanup".into())
            .spawn(move || match group.clean_up(&storage, &job) {
                Ok(done) => tracing::info!(
                    group = %group.inner.name,
                    markers = done.markers,
                    runs = done.runs,
                    "group: cleaned up the checkpoint storage"
                ),
                Err(e) => {
                    tracing::warn!(group = %group.inner.name, error = %e, "group: clean-up failed")
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(group = %self.inner.name, error = %e, "group: cannot start the clean-up");
        }
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
            .write_markers(&mut transactions, checkpoint, &offsets)
            .and_then(|()| self.commit_transaction(&txn, &offsets));
        // A producer whose transaction could neither commit nor abort is dropped.
        if result.is_ok() || txn.abort().is_ok() {
            transactions.free.push(txn);
        }
        result?;
        transactions.committed = checkpoint;
        Ok(())
    }

    /// Names checkpoint `checkpoint` by the offsets about to commit: a marker per partition,
    /// written before the commit, so that a committed offset always has its snapshot. The
    /// markers before the previous one are removed.
    fn write_markers(
        &self,
        transactions: &mut Transactions,
        checkpoint: u64,
        offsets: &BTreeMap<(String, i32), Position>,
    ) -> riffle::Result<()> {
        let Some(state) = &mut transactions.state else {
            return Ok(());
        };
        for ((topic, partition), position) in offsets {
            if !self.keyed(topic) && position.reader.is_none() {
                continue;
            }
            let marker = serde_json::to_vec(&Marker {
                job: state.job.clone(),
                checkpoint,
                reader: position.reader.clone(),
            })
            .map_err(riffle::Error::user)?;
            let offset = &position.next;
            let dir = marker_dir(&self.inner.name, topic, *partition, *offset);
            state
                .storage
                .write(&format!("{dir}/{MARKER_FILE}"), marker)?;
            let written = state
                .markers
                .entry((topic.clone(), *partition))
                .or_default();
            if written.back() != Some(offset) {
                written.push_back(*offset);
            }
            while written.len() > MARKERS_KEPT {
                let old = written.pop_front().expect("longer than kept");
                let old = marker_dir(&self.inner.name, topic, *partition, old);
                if let Err(e) = state.storage.delete_dir(&old) {
                    tracing::warn!(marker = %old, error = %e, "group: cannot remove an old marker");
                }
            }
        }
        Ok(())
    }

    /// The keyed state of the partitions this process owns, composed from the snapshots named by
    /// their committed offsets into one manifest under `storage` (a restore of it); `None` when
    /// no partition committed yet.
    fn compose_restore(
        &self,
        storage: &CheckpointStorage,
        location: &str,
        job: &str,
        max_parallelism: usize,
    ) -> riffle::Result<Option<RestoreFrom>> {
        let mut tpl = TopicPartitionList::new();
        for (topic, partition) in self.assignment() {
            tpl.add_partition(&topic, partition);
        }
        let committed = self
            .inner
            .member
            .committed_offsets(tpl, TIMEOUT)
            .map_err(|e| kafka_error("cannot read the group's committed offsets", e))?;
        let (restored, parts) =
            self.named_snapshots(storage, committed_positions(&committed), max_parallelism)?;
        *self.inner.restored.lock().expect("restored lock") = restored;
        if parts.is_empty() {
            return Ok(None);
        }
        let manifest = Manifest::compose(job, parts).map_err(riffle::Error::Checkpoint)?;
        // Distinct files: a store composed for several ranges is named once per range.
        let files: BTreeMap<&str, &riffle::checkpoint::FileRef> = manifest
            .all_files()
            .map(|file| (file.path.as_str(), file))
            .collect();
        let warm = files.values().filter(|file| storage.is_warm(file)).count();
        let dir = format!("{}-restore/{job}", self.inner.name);
        storage.write_manifest(&dir, &manifest)?;
        tracing::info!(
            group = %self.inner.name,
            manifest = %dir,
            files = files.len(),
            warm,
            "group: restoring the partitions' state ({warm} files held warm by the standby replica)"
        );
        Ok(Some(RestoreFrom::Manifest {
            location: location.to_string(),
            dir,
        }))
    }

    /// What the markers of the committed offsets `committed` (topic, partition, offset) name:
    /// the reader positions they hold, and, for the partitions that carry keyed state, their
    /// snapshots as parts of a manifest, each with the key groups of its partitions.
    fn named_snapshots(
        &self,
        storage: &CheckpointStorage,
        committed: impl IntoIterator<Item = (String, i32, i64)>,
        max_parallelism: usize,
    ) -> riffle::Result<(ReaderPositions, Vec<ManifestPart>)> {
        let mut restored = BTreeMap::new();
        let mut snapshots: BTreeMap<(String, u64), Vec<KeyGroupRange>> = BTreeMap::new();
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for (topic, partition, offset) in committed {
            let topic = topic.as_str();
            let dir = marker_dir(&self.inner.name, topic, partition, offset);
            let marker = storage.read_optional(&format!("{dir}/{MARKER_FILE}"))?;
            if !self.keyed(topic) {
                // A source partition: only where its reader stood (its event time), if recorded.
                if let Some(reader) = marker
                    .and_then(|bytes| serde_json::from_slice::<Marker>(&bytes).ok())
                    .and_then(|marker| marker.reader)
                {
                    restored.insert((topic.to_string(), partition), reader);
                }
                continue;
            }
            let Some(bytes) = marker else {
                return Err(riffle::Error::Checkpoint(format!(
                    "{topic}-{partition} committed offset {offset} in group `{}`, but no snapshot \
                     in {} is named by it (`{dir}`): the checkpoint storage is not the one the \
                     group used, or was cleaned",
                    self.inner.name,
                    storage.description()
                )));
            };
            let marker: Marker = serde_json::from_slice(&bytes).map_err(|e| {
                riffle::Error::Checkpoint(format!("`{dir}` is not a usable marker: {e}"))
            })?;
            if let Some(reader) = marker.reader {
                restored.insert((topic.to_string(), partition), reader);
            }
            let partitions = match counts.get(topic) {
                Some(n) => *n,
                None => {
                    let n = self.partition_count(topic)?;
                    counts.insert(topic.to_string(), n);
                    n
                }
            };
            if partitions > max_parallelism {
                return Err(riffle::Error::config(
                    "max_parallelism",
                    format!(
                        "is {max_parallelism}, below the {partitions} partitions of `{topic}`: \
                         a partition must own at least one key group"
                    ),
                ));
            }
            snapshots
                .entry((marker.job, marker.checkpoint))
                .or_default()
                .push(KeyGroupRange::for_subtask(
                    partition as usize,
                    partitions,
                    max_parallelism,
                ));
        }
        let parts = snapshots
            .into_iter()
            .map(|((prefix, checkpoint), key_groups)| {
                let manifest =
                    storage.read_manifest(&format!("{prefix}/{}", checkpoint_dir(checkpoint)))?;
                Ok(ManifestPart {
                    prefix,
                    manifest,
                    key_groups,
                })
            })
            .collect::<riffle::Result<Vec<_>>>()?;
        Ok((restored, parts))
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
    ) -> riffle::Result<()> {
        txn.producer
            .flush(TIMEOUT)
            .map_err(|e| kafka_error(format!("cannot flush `{}`", txn.id), e))?;
        crate::sink::delivery_failure(txn.producer.context(), &txn.id)?;
        if !offsets.is_empty() {
            let mut tpl = TopicPartitionList::new();
            for ((topic, partition), position) in offsets {
                tpl.add_partition_offset(topic, *partition, Offset::Offset(position.next))
                    .map_err(|e| kafka_error("bad offset", e))?;
                // Who committed it: what `status` reports as the partition's owner.
                if let Some(mut element) = tpl.find_partition(topic, *partition) {
                    element.set_metadata(self.inner.label.as_str());
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
    let mut runs = 0u64;
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
        // Each run's snapshots in their own directory of the shared storage (checkpoint ids
        // start again at 1 in every run, and markers name snapshots by job and id).
        runs += 1;
        let job = format!(
            "{}-{}-{generation}-{runs}",
            config.job_name, group.inner.instance
        );
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
        let restore = group.compose_restore(&open()?, &location, &job, config.max_parallelism)?;
        group.clean_up_in_background(open()?, job.clone());
        let every = config
            .checkpoints
            .interval
            .unwrap_or(Duration::from_secs(1));
        group.start_standby(open()?, config.max_parallelism, every);
        let warm_files = group.warm_files();
        env.configure(|c| {
            c.checkpoints.warm_files = warm_files;
            c.job_name = job.clone();
            c.checkpoints.restart = riffle::checkpoint::RestartStrategy::None;
            c.checkpoints.restore = restore;
        });
        group.begin_run(
            generation,
            Some(RunState {
                storage: open()?,
                job,
                markers: BTreeMap::new(),
            }),
        );
        let started = Instant::now();
        let result = execute(&env);
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
/// partition), as their markers hold it.
type ReaderPositions = BTreeMap<(String, i32), serde_json::Value>;

/// The partitions of `committed` that have a committed offset, with it.
fn committed_positions(committed: &TopicPartitionList) -> Vec<(String, i32, i64)> {
    committed
        .elements()
        .iter()
        .filter_map(|element| match element.offset() {
            Offset::Offset(offset) => {
                Some((element.topic().to_string(), element.partition(), offset))
            }
            _ => None, // nothing committed yet: no state
        })
        .collect()
}

/// The directory of the marker naming the snapshot taken at `offset` of `topic`-`partition`.
fn marker_dir(group: &str, topic: &str, partition: i32, offset: i64) -> String {
    format!("{group}-state/{topic}-{partition}/{offset}")
}

//! Reading one partition: what the Kafka source and the shuffle's consumer side share. A
//! [`PartitionReader`] owns a manually assigned consumer (no group rebalancing: the job decides
//! who reads what), the next offset to read, and the partition's last stable offset from
//! librdkafka's statistics (the lag metric); it resolves where a partition starts, seeks, hands
//! each new message to its owner's decoding, records offsets in a process group's checkpoints
//! and commits them to the consumer group when a checkpoint completes (outside a group). What a
//! message means — a record to decode, or a shuffle's control record — is the owner's.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::message::BorrowedMessage;
use rdkafka::statistics::Statistics;
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};
use riffle::source::ReadStatus;

use crate::{KafkaConnection, KafkaGroup, KafkaPartition, StartFrom, kafka_error};

/// Time allowed to metadata and offset lookups when a reader starts.
pub(crate) const LOOKUP_TIMEOUT: Duration = Duration::from_secs(30);

/// How a partition's consumer is made.
pub(crate) struct ConsumerSettings<'a> {
    /// librdkafka settings the connection's own settings may override.
    pub(crate) defaults: &'a [(&'a str, &'a str)],
    /// Settings that hold whatever the connection says (e.g. a shuffle's isolation level).
    pub(crate) forced: &'a [(&'a str, &'a str)],
    /// The consumer group whose offsets are read at the start and committed after checkpoints.
    pub(crate) group_id: String,
    /// Where the partition starts when no position is restored.
    pub(crate) start: StartFrom,
    /// What the consumer is, for errors ("a consumer", "a shuffle consumer").
    pub(crate) what: &'a str,
}

/// One partition's consumer and position.
pub(crate) struct PartitionReader {
    consumer: BaseConsumer<PartitionContext>,
    split: KafkaPartition,
    split_id: String,
    /// The next offset to read.
    next: i64,
    /// The partition's last stable offset, from the consumer's statistics.
    end: Arc<AtomicI64>,
    /// The process group this partition was assigned by.
    group: Option<KafkaGroup>,
    /// Where a bounded read stops (the partition's latest offset when the job first started).
    stop: Option<i64>,
    last_error_log: Option<Instant>,
}

impl PartitionReader {
    /// Creates the partition's consumer, resolves where it starts and assigns it there.
    pub(crate) fn open(
        kafka: &KafkaConnection,
        split: KafkaPartition,
        settings: ConsumerSettings<'_>,
        group: Option<KafkaGroup>,
    ) -> riffle::Result<Self> {
        let context = PartitionContext {
            end: Arc::new(AtomicI64::new(-1)),
        };
        let end = context.end.clone();
        let mut config = kafka.client_config_with(settings.defaults);
        for (key, value) in settings.forced {
            config.set(*key, *value);
        }
        let consumer: BaseConsumer<PartitionContext> = config
            .set("statistics.interval.ms", "1000")
            .set("group.id", settings.group_id)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .create_with_context(context)
            .map_err(|e| kafka_error(format!("cannot create {}", settings.what), e))?;
        let next = start_offset(&consumer, &split, settings.start)?;
        let mut reader = PartitionReader {
            consumer,
            split_id: format!("{}-{}", split.topic, split.partition),
            split,
            next,
            end,
            group,
            stop: None,
            last_error_log: None,
        };
        reader.assign()?;
        Ok(reader)
    }

    /// `topic-partition`.
    pub(crate) fn split_id(&self) -> &str {
        &self.split_id
    }

    /// The partition read.
    pub(crate) fn split(&self) -> &KafkaPartition {
        &self.split
    }

    /// The next offset to read: the split's position.
    pub(crate) fn next_offset(&self) -> i64 {
        self.next
    }

    /// The partition's oldest and latest offsets (asked again while the broker cannot answer
    /// yet, for up to [`crate::TRANSIENT_DEADLINE`]).
    fn offsets(&self) -> riffle::Result<(i64, i64)> {
        crate::retry_transient(|| {
            self.consumer
                .fetch_watermarks(&self.split.topic, self.split.partition, LOOKUP_TIMEOUT)
                .map_err(|e| {
                    kafka_error(format!("cannot read the offsets of {}", self.split_id), e)
                })
        })
    }

    /// Makes the read bounded: it stops where `stop` says, looked up now (the latest offset is
    /// the last stable one, for a `read_committed` consumer).
    pub(crate) fn stop_at(&mut self, stop: &crate::StopAt) -> riffle::Result<()> {
        let (topic, partition) = (self.split.topic.clone(), self.split.partition);
        let offset = match stop {
            crate::StopAt::Latest => self.offsets()?.1,
            crate::StopAt::Offsets(offsets) => match offsets.get(&partition) {
                Some(offset) => *offset,
                None => self.offsets()?.1,
            },
            crate::StopAt::GroupOffsets => {
                let split = self.split.clone();
                crate::retry_transient(|| {
                    committed_offset(&self.consumer, &split)
                })?
                .ok_or_else(|| {
                    riffle::Error::config(
                        "until",
                        format!(
                            "StopAt::GroupOffsets ('scan.bounded.mode' = 'group-offsets'): the consumer group has committed no offset of {topic}-{partition} to stop at"
                        ),
                    )
                })?
            }
            crate::StopAt::Timestamp(at) => {
                let split = self.split.clone();
                match crate::retry_transient(|| offset_for_time(&self.consumer, &split, *at))? {
                    Some(offset) => offset,
                    None => self.offsets()?.1,
                }
            }
        };
        self.stop = Some(offset);
        Ok(())
    }

    /// Where a bounded read stops, if it is bounded.
    pub(crate) fn stop(&self) -> Option<i64> {
        self.stop
    }

    /// Stops a bounded read at `stop` (restored from a checkpoint: where the first run stopped).
    pub(crate) fn set_stop(&mut self, stop: i64) {
        self.stop = Some(stop);
    }

    /// Whether a bounded read has read everything before its stop: its next offset, or the
    /// consumer's position (past the transaction markers it skips), is there.
    pub(crate) fn reached_stop(&self) -> bool {
        let Some(stop) = self.stop else {
            return false;
        };
        if self.next >= stop {
            return true;
        }
        self.consumer.position().is_ok_and(|positions| {
            positions
                .find_partition(&self.split.topic, self.split.partition)
                .is_some_and(|p| matches!(p.offset(), Offset::Offset(at) if at >= stop))
        })
    }

    /// The process group that assigned the partition, if any.
    pub(crate) fn group(&self) -> Option<&KafkaGroup> {
        self.group.as_ref()
    }

    fn assign(&mut self) -> riffle::Result<()> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(
            &self.split.topic,
            self.split.partition,
            Offset::Offset(self.next),
        )
        .and_then(|()| self.consumer.assign(&tpl))
        .map_err(|e| kafka_error(format!("cannot assign {}", self.split_id), e))
    }

    /// Hands up to `max` new messages to `take` (messages fetched before a seek are skipped);
    /// `Ok(Ok(n))` with the number taken, `Ok(Err(status))` for `read` to return after a client
    /// error (retried by the client, logged at most every 10 s). In a process group that
    /// rebalanced, the run ends with the group's error.
    pub(crate) fn read(
        &mut self,
        max: usize,
        mut take: impl FnMut(i64, &BorrowedMessage<'_>),
    ) -> riffle::Result<Result<usize, ReadStatus>> {
        if let Some(group) = &self.group
            && group.rebalanced()
        {
            return Err(group.rebalanced_error());
        }
        let mut read = 0;
        while read < max {
            let message =
                match next_message(&self.consumer, &self.split_id, &mut self.last_error_log) {
                    Ok(Some(message)) => message,
                    Ok(None) => break,
                    Err(status) => return Ok(Err(status)),
                };
            let offset = message.offset();
            if offset < self.next {
                continue; // fetched before a seek
            }
            if self.stop.is_some_and(|stop| offset >= stop) {
                break; // past the end of a bounded read
            }
            self.next = offset + 1;
            read += 1;
            take(offset, &message);
        }
        Ok(Ok(read))
    }

    /// Reads from `offset` on (a restored position).
    pub(crate) fn seek(&mut self, offset: i64) -> riffle::Result<()> {
        self.next = offset;
        self.assign()
    }

    /// Reads from the oldest record the partition has: a restore that holds no position for it.
    /// In a group, a partition starts at the group's committed offset, always (a restore of
    /// keyed state carries no positions): nothing changes.
    pub(crate) fn start_at_beginning(&mut self) -> riffle::Result<()> {
        if self.group.is_some() {
            return Ok(());
        }
        let (low, _) = self.offsets()?;
        self.seek(low)
    }

    /// In a process group, records the next offset (and what the owner keeps with it) for the
    /// group's transaction of checkpoint `checkpoint_id`.
    pub(crate) fn record_offset(&self, checkpoint_id: u64, reader: Option<serde_json::Value>) {
        if let Some(group) = &self.group {
            group.record_offset(
                checkpoint_id,
                &self.split.topic,
                self.split.partition,
                self.next,
                reader,
            );
        }
    }

    /// A checkpoint holding `position` completed: commit its offset to the consumer group, for
    /// monitoring (`kafka-consumer-groups.sh`; the offsets in the checkpoint are what counts).
    /// In a process group, offsets are committed in the group's transaction instead.
    pub(crate) fn checkpoint_complete(&mut self, position: &serde_json::Value) {
        if self.group.is_some() {
            return;
        }
        let Some(offset) = position.get("offset").and_then(|o| o.as_i64()) else {
            return;
        };
        let mut tpl = TopicPartitionList::new();
        let commit = tpl
            .add_partition_offset(
                &self.split.topic,
                self.split.partition,
                Offset::Offset(offset),
            )
            .and_then(|()| self.consumer.commit(&tpl, CommitMode::Async));
        if let Err(e) = commit {
            tracing::warn!(partition = %self.split_id, error = %e, "cannot commit the offset to the consumer group");
        }
    }

    /// Records between the next offset and the partition's last stable offset.
    pub(crate) fn lag(&self) -> Option<i64> {
        let end = self.end.load(Ordering::Relaxed);
        (end >= 0).then(|| (end - self.next).max(0))
    }
}

/// Resolves where a partition starts to a concrete offset, so that a checkpoint taken before its
/// first record still stores a position that means the same thing after a restore. A broker
/// that cannot answer yet (a partition just created has no leader for a moment, a leader
/// moving) is asked again, for up to [`crate::TRANSIENT_DEADLINE`].
fn start_offset<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    split: &KafkaPartition,
    start: StartFrom,
) -> riffle::Result<i64> {
    crate::retry_transient(|| start_offset_once(consumer, split, start))
}

fn start_offset_once<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    split: &KafkaPartition,
    start: StartFrom,
) -> riffle::Result<i64> {
    let (topic, partition) = (split.topic.as_str(), split.partition);
    let watermarks = || {
        consumer
            .fetch_watermarks(topic, partition, LOOKUP_TIMEOUT)
            .map_err(|e| kafka_error(format!("cannot read the offsets of {topic}-{partition}"), e))
    };
    match start {
        StartFrom::Earliest => Ok(watermarks()?.0),
        StartFrom::Latest => Ok(watermarks()?.1),
        StartFrom::GroupOffsets => match committed_offset(consumer, split)? {
            Some(offset) => Ok(offset),
            None => Ok(watermarks()?.0),
        },
        StartFrom::Timestamp(at) => match offset_for_time(consumer, split, at)? {
            Some(offset) => Ok(offset),
            None => Ok(watermarks()?.1),
        },
    }
}

/// The offset of `split` its consumer's group has committed, if any.
fn committed_offset<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    split: &KafkaPartition,
) -> riffle::Result<Option<i64>> {
    let (topic, partition) = (split.topic.as_str(), split.partition);
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, partition);
    let committed = consumer
        .committed_offsets(tpl, LOOKUP_TIMEOUT)
        .map_err(|e| {
            kafka_error(
                format!("cannot read the committed offset of {topic}-{partition}"),
                e,
            )
        })?;
    Ok(
        match committed
            .find_partition(topic, partition)
            .map(|p| p.offset())
        {
            Some(Offset::Offset(offset)) => Some(offset),
            _ => None,
        },
    )
}

/// The offset of the first record of `split` whose timestamp is at or after `at` (ms since
/// the epoch), if there is one.
fn offset_for_time<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    split: &KafkaPartition,
    at: i64,
) -> riffle::Result<Option<i64>> {
    let (topic, partition) = (split.topic.as_str(), split.partition);
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(at))
        .map_err(|e| kafka_error("bad timestamp", e))?;
    let found = consumer
        .offsets_for_times(tpl, LOOKUP_TIMEOUT)
        .map_err(|e| {
            kafka_error(
                format!("cannot look up offsets by time in {topic}-{partition}"),
                e,
            )
        })?;
    Ok(
        match found.find_partition(topic, partition).map(|p| p.offset()) {
            Some(Offset::Offset(offset)) => Some(offset),
            _ => None,
        },
    )
}

/// The next message of a partition's consumer: `Ok(None)` when none is there now, `Err(status)`
/// to return from `read` after a client error (broker and network errors are retried by the
/// client; they are logged at most every 10 s through `last_error_log`).
fn next_message<'a, C: ConsumerContext>(
    consumer: &'a BaseConsumer<C>,
    split_id: &str,
    last_error_log: &mut Option<Instant>,
) -> Result<Option<rdkafka::message::BorrowedMessage<'a>>, ReadStatus> {
    match consumer.poll(Duration::ZERO) {
        None => Ok(None),
        Some(Ok(message)) => Ok(Some(message)),
        Some(Err(e)) => {
            if last_error_log.is_none_or(|at| at.elapsed() > Duration::from_secs(10)) {
                tracing::warn!(partition = %split_id, error = %e, "Kafka consumer error (retrying)");
                *last_error_log = Some(Instant::now());
            }
            Err(ReadStatus::Pending(Some(
                Instant::now() + Duration::from_millis(100),
            )))
        }
    }
}

/// Receives a consumer's statistics: the partition's last stable offset, for the lag metric.
struct PartitionContext {
    end: Arc<AtomicI64>,
}

impl ClientContext for PartitionContext {
    fn stats(&self, statistics: Statistics) {
        for topic in statistics.topics.values() {
            for (id, partition) in &topic.partitions {
                if *id >= 0 && partition.ls_offset >= 0 {
                    self.end.store(partition.ls_offset, Ordering::Relaxed);
                }
            }
        }
    }
}

impl ConsumerContext for PartitionContext {}

//! Where a process group stands, from the brokers: what `/api/v1/group` serves.

use std::collections::BTreeMap;

use rdkafka::Offset;
use rdkafka::consumer::Consumer;
use serde::{Deserialize, Serialize};

use super::{KafkaGroup, MissingState, TIMEOUT, note};
use crate::kafka_error;

impl KafkaGroup {
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

//! Where a script's jobs run: in this process (the default), or as one member of a group of
//! processes on Kafka (`riffle sql -f job.sql --group NAME`, docs/scale-out.md).
//!
//! In a group, each member runs the whole script on the partitions Kafka assigns to it:
//!
//! - its `kafka` (and `upsert-kafka`, Debezium) tables read the partitions the group assigns,
//!   from the group's committed offsets ([`KafkaSource::in_group`]);
//! - its Kafka sinks write in the group's transactions ([`KafkaSink::in_group`]), which commit
//!   the input offsets, the records and the state snapshot they name as one;
//! - every keyed step (a window aggregation, a `GROUP BY`, a join's two sides, a Top-N, an
//!   `OVER` aggregation, `MATCH_RECOGNIZE`, an upsert table's normalization) reads its rows
//!   through a repartition topic ([`KafkaShuffleExt::through_kafka`]), so that its keyed state
//!   moves with that topic's partitions between members.
//!
//! A member learns which topics the group reads before it joins: [`SqlEnv::plan_group`] runs
//! the script once without a group ([`Mode::Planning`]) and records the source topics and the
//! repartition topics the keyed steps need, numbered in the order the script meets them (so
//! every member, running the same script, names them alike).
//!
//! Only what commits in the group's transactions can be read or written in a group: Kafka
//! tables, and `print` and `blackhole` tables (which keep nothing). A `filesystem` or `jdbc`
//! table commits with checkpoints of one process, and a generator reads the same rows in
//! every member: both are refused, naming the table.
//!
//! [`KafkaSource::in_group`]: riffle_kafka::KafkaSource::in_group
//! [`KafkaSink::in_group`]: riffle_kafka::KafkaSink::in_group
//! [`KafkaShuffleExt::through_kafka`]: riffle_kafka::KafkaShuffleExt::through_kafka
//! [`SqlEnv::plan_group`]: crate::SqlEnv::plan_group

use std::cell::Cell;
#[cfg(feature = "kafka")]
use std::cell::RefCell;
use std::hash::Hash;

use riffle::api::KeyedStream;
use riffle::{Data, DataStream};

use crate::error::{Result, SqlError};
use crate::parse::TableDef;

/// Where the jobs of one [`SqlEnv`](crate::SqlEnv) run, and how many repartition topics its
/// statements have asked for so far.
#[derive(Default)]
pub(crate) struct Placement {
    mode: Mode,
    exchanges: Cell<usize>,
}

/// How a [`Placement`] places jobs.
#[derive(Default)]
pub(crate) enum Mode {
    /// In this process, exchanges between subtasks in memory.
    #[default]
    Local,
    /// Planning a group's job: the topics are recorded, nothing is placed.
    #[cfg(feature = "kafka")]
    Planning(RefCell<GroupPlan>),
    /// As one member of `group`.
    #[cfg(feature = "kafka")]
    Member {
        group: riffle_kafka::KafkaGroup,
        kafka: riffle_kafka::KafkaConnection,
        partitions: usize,
    },
}

/// What a member of a group of processes reads and writes ([`SqlEnv::plan_group`]): the Kafka
/// cluster of the script's tables, the topics its tables read, and the repartition topics of
/// its keyed steps.
///
/// [`SqlEnv::plan_group`]: crate::SqlEnv::plan_group
#[cfg(feature = "kafka")]
#[derive(Clone, Debug)]
pub struct GroupPlan {
    /// The group's name.
    pub name: String,
    /// The cluster of the script's Kafka tables (`None` until a Kafka table is read).
    pub kafka: Option<riffle_kafka::KafkaConnection>,
    /// The topics the script's tables read, in the order it reads them.
    pub topics: Vec<String>,
    /// The uids of the repartition topics of the script's keyed steps.
    pub shuffle_uids: Vec<String>,
    /// The partitions of each repartition topic: the group's upper bound on members per step.
    pub partitions: usize,
}

#[cfg(feature = "kafka")]
impl GroupPlan {
    /// The repartition topics of the script's keyed steps (create them before joining).
    pub fn shuffles(&self) -> Vec<riffle_kafka::KafkaShuffle> {
        let Some(kafka) = &self.kafka else {
            return Vec::new();
        };
        self.shuffle_uids
            .iter()
            .map(|uid| {
                riffle_kafka::KafkaShuffle::new(kafka.clone(), &self.name, uid)
                    .partitions(self.partitions)
            })
            .collect()
    }

    /// Every topic a member reads: the tables' and the repartition topics.
    pub fn all_topics(&self) -> Vec<String> {
        let mut topics = self.topics.clone();
        topics.extend(self.shuffles().iter().map(|s| s.topic()));
        topics
    }
}

impl Placement {
    /// A placement planning the job of group `name` with `partitions` per repartition topic.
    #[cfg(feature = "kafka")]
    pub(crate) fn planning(name: &str, partitions: usize) -> Placement {
        Placement {
            mode: Mode::Planning(RefCell::new(GroupPlan {
                name: name.to_string(),
                kafka: None,
                topics: Vec::new(),
                shuffle_uids: Vec::new(),
                partitions,
            })),
            exchanges: Cell::new(0),
        }
    }

    /// A placement as a member of `group` (whose plan is `plan`).
    #[cfg(feature = "kafka")]
    pub(crate) fn member(group: &riffle_kafka::KafkaGroup, plan: &GroupPlan) -> Result<Placement> {
        let kafka = plan.kafka.clone().ok_or_else(|| {
            SqlError::plan("a group's script reads at least one kafka table (none is read)")
        })?;
        Ok(Placement {
            mode: Mode::Member {
                group: group.clone(),
                kafka,
                partitions: plan.partitions,
            },
            exchanges: Cell::new(0),
        })
    }

    /// The plan recorded while planning.
    #[cfg(feature = "kafka")]
    pub(crate) fn plan(&self) -> Option<GroupPlan> {
        match &self.mode {
            Mode::Planning(plan) => Some(plan.borrow().clone()),
            _ => None,
        }
    }

    /// Whether the jobs run in a group (or are planned for one).
    fn grouped(&self) -> bool {
        !matches!(self.mode, Mode::Local)
    }

    /// `rows` keyed by `key` for the keyed step `what`. In one process, rows that are
    /// partitioned by that key already (`in_place`) stay in their subtask: the step runs in
    /// the task before it, without an exchange. Otherwise, and in a group (where a keyed
    /// step's state moves with a repartition topic's partitions), as [`exchange`] places them.
    ///
    /// [`exchange`]: Placement::exchange
    pub(crate) fn keyed<K, T>(
        &self,
        rows: DataStream<T>,
        key: impl Fn(&T) -> K + Send + Sync + 'static,
        in_place: bool,
        what: &str,
    ) -> KeyedStream<K, T>
    where
        K: Data + Hash + Eq,
        T: Data,
    {
        match in_place && !self.grouped() {
            true => rows.reinterpret_as_keyed(key),
            false => self.exchange(rows.key_by(key), what),
        }
    }

    /// `keyed` as the keyed step `what` reads it: as it is in one process, through the next
    /// repartition topic in a group.
    pub(crate) fn exchange<K, T>(&self, keyed: KeyedStream<K, T>, what: &str) -> KeyedStream<K, T>
    where
        K: Data + Hash + Eq,
        T: Data,
    {
        if !self.grouped() {
            return keyed;
        }
        let n = self.exchanges.get() + 1;
        self.exchanges.set(n);
        let _uid = format!("sql-{n}-{}", slug(what));
        match &self.mode {
            Mode::Local => keyed,
            #[cfg(feature = "kafka")]
            Mode::Planning(plan) => {
                plan.borrow_mut().shuffle_uids.push(_uid);
                keyed
            }
            #[cfg(feature = "kafka")]
            Mode::Member {
                group,
                kafka,
                partitions,
            } => {
                use riffle_kafka::KafkaShuffleExt;
                let shuffle = riffle_kafka::KafkaShuffle::new(kafka.clone(), group.name(), _uid)
                    .partitions(*partitions)
                    .in_group(group);
                keyed.through_kafka(shuffle)
            }
        }
    }

    /// Refuses `what` (an event-time step) over rows that came through a repartition topic
    /// already, in a group: the shuffle's watermarks are written per source partition of the
    /// group by the stream that reads them, and one written by a stage that reads another
    /// repartition topic is not built (docs/scale-out.md).
    pub(crate) fn event_time_once(&self, what: &str) -> Result<()> {
        if !self.grouped() {
            return Ok(());
        }
        Err(SqlError::plan(format!(
            "{what} in event time over rows that went through a keyed step (a join, an \
             aggregate, a window, a Top-N, an upsert table) cannot run in a group of processes \
             (--group) yet: event time through two repartition topics in a row is not built; \
             run it in one process, or in processing time"
        )))
    }

    /// The two sides of a join, keyed by `key`, as the join reads them: each keyed as it is in
    /// one process; in a group, both through one repartition topic, each row tagged with its
    /// side, so that the join's state of a key group is fed by one partition and has one owner
    /// (two topics' partitions of one number may be assigned to two members).
    pub(crate) fn exchange_join<K, T>(
        &self,
        left: DataStream<T>,
        right: DataStream<T>,
        key: impl Fn(&T) -> K + Clone + Send + Sync + 'static,
    ) -> (KeyedStream<K, T>, KeyedStream<K, T>)
    where
        K: Data + Hash + Eq,
        T: Data,
    {
        if !self.grouped() {
            return (left.key_by(key.clone()), right.key_by(key));
        }
        let tagged = left
            .map(|row: T| (false, row))
            .name("Join side (left)")
            .union(&[&right.map(|row: T| (true, row)).name("Join side (right)")]);
        let by_key = key.clone();
        let read = self
            .exchange(
                tagged.key_by(move |(_, row): &(bool, T)| by_key(row)),
                "join",
            )
            .unkeyed();
        let side = |right: bool, name: &str| {
            read.filter(move |(side, _): &(bool, T)| *side == right)
                .map(|(_, row): (bool, T)| row)
                .name(name)
        };
        (
            side(false, "Join rows (left)").key_by(key.clone()),
            side(true, "Join rows (right)").key_by(key),
        )
    }

    /// Checks that `table` can be read (`verb` "read") or written ("written") where the jobs
    /// run: anything in one process; in a group, only what commits in its transactions.
    pub(crate) fn check(&self, table: &TableDef, verb: &str) -> Result<()> {
        if !self.grouped() || table.rows.is_some() {
            return Ok(());
        }
        let connector = table.options.get("connector").map_or("", String::as_str);
        let allowed = match verb {
            "read" => matches!(connector, "kafka" | "upsert-kafka"),
            _ => matches!(connector, "kafka" | "upsert-kafka" | "print" | "blackhole"),
        };
        if allowed {
            return Ok(());
        }
        Err(SqlError::plan(format!(
            "table `{}` ('connector' = '{connector}') cannot be {verb} by a group of processes \
             (--group): its members commit in Kafka transactions, so they read kafka and \
             upsert-kafka tables and write those, print and blackhole tables",
            table.name
        )))
    }

    /// A Kafka table's source where the jobs run: as configured in one process; reading the
    /// partitions the group assigns, from its committed offsets, in a group.
    #[cfg(feature = "kafka")]
    pub(crate) fn kafka_source<T: Data>(
        &self,
        table: &TableDef,
        kafka: &riffle_kafka::KafkaConnection,
        topics: &[String],
        source: riffle_kafka::KafkaSource<T>,
    ) -> Result<riffle_kafka::KafkaSource<T>> {
        if self.grouped()
            && let Some(mode) = table.options.get("scan.bounded.mode")
            && mode != "unbounded"
        {
            return Err(SqlError::plan(format!(
                "table `{}`: 'scan.bounded.mode' = '{mode}': a group of processes (--group) \
                 reads its topics until it is stopped",
                table.name
            )));
        }
        match &self.mode {
            Mode::Local => Ok(source),
            Mode::Planning(plan) => {
                let mut plan = plan.borrow_mut();
                same_cluster(&mut plan.kafka, kafka, table)?;
                for topic in topics {
                    // A group commits one offset per partition: two readers of a topic would
                    // commit two.
                    if plan.topics.contains(topic) {
                        return Err(SqlError::plan(format!(
                            "table `{}`: the topic `{topic}` is read a second time (by another \
                             statement or table): a group of processes (--group) commits one \
                             offset per partition, so it reads each topic once: run the \
                             statements in groups of their own",
                            table.name
                        )));
                    }
                    plan.topics.push(topic.clone());
                }
                Ok(source)
            }
            Mode::Member { group, .. } => Ok(source.in_group(group)),
        }
    }

    /// Checks that a Kafka table written to is on the group's cluster (and records it while
    /// planning).
    #[cfg(feature = "kafka")]
    pub(crate) fn kafka_sink(
        &self,
        table: &TableDef,
        kafka: &riffle_kafka::KafkaConnection,
    ) -> Result<()> {
        match &self.mode {
            Mode::Planning(plan) => same_cluster(&mut plan.borrow_mut().kafka, kafka, table),
            _ => Ok(()),
        }
    }

    /// A Kafka table's sink where the jobs run: as configured in one process; writing in the
    /// group's transactions in a group.
    #[cfg(feature = "kafka")]
    pub(crate) fn place_sink<T: Data>(
        &self,
        sink: riffle_kafka::KafkaSink<T>,
    ) -> riffle_kafka::KafkaSink<T> {
        match &self.mode {
            Mode::Member { group, .. } => sink.in_group(group),
            _ => sink,
        }
    }
}

/// Records `kafka` as the group's cluster, or checks that it is the one recorded: a group's
/// transactions span one cluster.
#[cfg(feature = "kafka")]
fn same_cluster(
    recorded: &mut Option<riffle_kafka::KafkaConnection>,
    kafka: &riffle_kafka::KafkaConnection,
    table: &TableDef,
) -> Result<()> {
    match recorded {
        None => {
            *recorded = Some(kafka.clone());
            Ok(())
        }
        Some(group) if group.bootstrap() == kafka.bootstrap() => Ok(()),
        Some(group) => Err(SqlError::plan(format!(
            "table `{}`: 'properties.bootstrap.servers' = '{}', but the group's other Kafka \
             tables are on '{}': a group of processes commits in one cluster's transactions",
            table.name,
            kafka.bootstrap(),
            group.bootstrap()
        ))),
    }
}

/// `what` as a piece of a topic name: lower-case letters, digits and `-`.
fn slug(what: &str) -> String {
    let mut out = String::with_capacity(what.len());
    for c in what.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A topic read by two statements, planned for a group: refused, naming it; a join and
    /// a window over other tables: planned, with their repartition topics.
    #[cfg(feature = "kafka")]
    #[test]
    fn a_group_plans_a_repartition_topic_per_keyed_step_and_refuses_a_topic_read_twice() {
        let table = |name: &str| {
            format!(
                "CREATE TABLE {name} (id BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts)
                 WITH ('connector' = 'kafka', 'topic' = '{name}', 'format' = 'json',
                       'properties.bootstrap.servers' = '127.0.0.1:1');"
            )
        };
        let ddl = format!(
            "{}{}CREATE TABLE out (id BIGINT, n BIGINT) WITH ('connector' = 'blackhole');",
            table("a"),
            table("b")
        );
        let plan = |script: &str| {
            let sql = crate::SqlEnv::new(&riffle::StreamEnv::new());
            sql.plan_group("g", 4, &format!("{ddl}{script}"))
                .map(|(_, plan)| plan)
        };
        let twice =
            plan("INSERT INTO out SELECT id, 1 FROM a; INSERT INTO out SELECT id, 2 FROM a;");
        let error = twice.expect_err("a topic read twice").to_string();
        assert!(
            error.contains("the topic `a` is read a second time"),
            "{error}"
        );
        // One window over one table, and a join: planned, with their repartition topics.
        let plan = plan(
            "INSERT INTO out SELECT a.id, b.id FROM a JOIN b ON a.id = b.id;
             CREATE TABLE c (id BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts)
             WITH ('connector' = 'kafka', 'topic' = 'c', 'format' = 'json',
                   'properties.bootstrap.servers' = '127.0.0.1:1');
             INSERT INTO out SELECT id, COUNT(*) FROM TABLE(TUMBLE(TABLE c, DESCRIPTOR(ts),
               INTERVAL '1' SECOND)) GROUP BY id, window_start, window_end;",
        )
        .unwrap();
        assert_eq!(plan.topics, ["a", "b", "c"]);
        assert_eq!(
            plan.all_topics(),
            [
                "a",
                "b",
                "c",
                "g-sql-1-join-repartition",
                "g-sql-2-window-repartition"
            ]
        );
    }

    #[test]
    fn a_step_names_its_topic_in_letters_digits_and_dashes() {
        assert_eq!(slug("Join keys (left)"), "join-keys-left");
        assert_eq!(slug("GroupAggregate"), "groupaggregate");
    }
}

//! Topic administration the connectors and demos need: create topics that do not exist yet, add
//! partitions, delete topics.

use std::time::Duration;

use rdkafka::admin::{
    AdminClient, AdminOptions, NewPartitions, NewTopic, TopicReplication, TopicResult,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::types::RDKafkaErrorCode;

use crate::{KafkaConnection, code_kind, kafka_error, kafka_failure};

const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

fn admin(kafka: &KafkaConnection) -> riffle::Result<AdminClient<DefaultClientContext>> {
    kafka
        .client_config()
        .create()
        .map_err(|e| kafka_error("cannot create an admin client", e))
}

/// Runs an admin future to completion (rdkafka's background thread resolves it).
fn wait<F: std::future::Future>(future: F) -> riffle::Result<F::Output> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| riffle::Error::io("cannot start a runtime for Kafka admin calls", e))?;
    Ok(runtime.block_on(future))
}

/// Creates the topics of `topics` (name, partitions) that do not exist yet, with the given
/// replication factor. Existing topics are left as they are.
///
/// ```no_run
/// use riffle_kafka::{ensure_topics, KafkaConnection};
/// ensure_topics(&KafkaConnection::new("127.0.0.1:9092"), &[("clicks", 8), ("agg-clicks", 4)], 1)?;
/// # Ok::<(), riffle::Error>(())
/// ```
pub fn ensure_topics(
    kafka: &KafkaConnection,
    topics: &[(&str, i32)],
    replication: i32,
) -> riffle::Result<()> {
    let admin = admin(kafka)?;
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|(name, partitions)| {
            NewTopic::new(name, *partitions, TopicReplication::Fixed(replication))
        })
        .collect();
    let options = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT));
    let results = wait(admin.create_topics(&new, &options))?
        .map_err(|e| kafka_error("cannot create topics", e))?;
    check(
        results,
        "create topic",
        Some(RDKafkaErrorCode::TopicAlreadyExists),
    )?;
    // A job started right after this reads the topics' partitions: they must be visible (a
    // topic just created showed none for a moment, and a source then failed at start).
    for (name, _) in topics {
        visible_partitions(&admin, name)?;
    }
    Ok(())
}

/// Creates `topic` with `partitions` partitions and the topic settings `configs` if it does
/// not exist; if it does, checks that it has `partitions` partitions (the error names
/// `setting`). Returns whether it was created.
pub(crate) fn ensure_topic_with(
    kafka: &KafkaConnection,
    topic: &str,
    partitions: i32,
    replication: i32,
    configs: &[(&str, &str)],
    setting: &str,
) -> riffle::Result<()> {
    let admin = admin(kafka)?;
    let mut new = NewTopic::new(topic, partitions, TopicReplication::Fixed(replication));
    for (key, value) in configs {
        new = new.set(key, value);
    }
    let options = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT));
    let results = wait(admin.create_topics([&new], &options))?
        .map_err(|e| kafka_error(format!("cannot create topic `{topic}`"), e))?;
    check(
        results,
        "create topic",
        Some(RDKafkaErrorCode::TopicAlreadyExists),
    )?;
    let found = visible_partitions(&admin, topic)?;
    if found != partitions as usize {
        return Err(riffle::Error::config(
            setting,
            format!(
                "is {partitions}, but topic `{topic}` exists with {found} partitions (a shuffle \
                 topic's partition count cannot change: delete the topic, or use another uid)"
            ),
        ));
    }
    Ok(())
}

/// How many partitions `topic` has. A topic just created may show none (or an error) for a
/// moment: this looks again until it has some, for up to the admin timeout.
fn visible_partitions(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
) -> riffle::Result<usize> {
    let deadline = std::time::Instant::now() + ADMIN_TIMEOUT;
    loop {
        let metadata = admin
            .inner()
            .fetch_metadata(Some(topic), ADMIN_TIMEOUT)
            .map_err(|e| kafka_error(format!("cannot read the partitions of `{topic}`"), e))?;
        let found = metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic && t.error().is_none())
            .map_or(0, |t| t.partitions().len());
        if found > 0 || std::time::Instant::now() >= deadline {
            return Ok(found);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Deletes `topics` (those that do not exist are skipped).
pub fn delete_topics(kafka: &KafkaConnection, topics: &[&str]) -> riffle::Result<()> {
    let admin = admin(kafka)?;
    let options = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT));
    let results = wait(admin.delete_topics(topics, &options))?
        .map_err(|e| kafka_error("cannot delete topics", e))?;
    check(
        results,
        "delete topic",
        Some(RDKafkaErrorCode::UnknownTopicOrPartition),
    )
}

/// Fails on the first topic whose operation failed with another code than `fine`.
fn check(
    results: Vec<TopicResult>,
    doing: &str,
    fine: Option<RDKafkaErrorCode>,
) -> riffle::Result<()> {
    for result in results {
        match result {
            Err((topic, code)) if Some(code) != fine => {
                return Err(kafka_failure(
                    code_kind(code),
                    format!("cannot {doing} `{topic}`"),
                    code.to_string(),
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Grows `topic` to `partitions` partitions (a running [`KafkaSource`](crate::KafkaSource)
/// picks the new ones up at its next discovery).
pub fn create_partitions(
    kafka: &KafkaConnection,
    topic: &str,
    partitions: usize,
) -> riffle::Result<()> {
    let admin = admin(kafka)?;
    let options = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT));
    let results =
        wait(admin.create_partitions(&[NewPartitions::new(topic, partitions)], &options))?
            .map_err(|e| kafka_error("cannot add partitions", e))?;
    check(results, "add partitions to", None)
}

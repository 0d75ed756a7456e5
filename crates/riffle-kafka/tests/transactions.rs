//! The exactly-once Kafka sink's transactional ids against a real broker: ids unique per job,
//! ids of a pool that shrank fenced on restore, the recovery scan bounded by `broker_timeout`,
//! and Kafka's errors typed (a fenced producer is told apart from a retriable failure).

mod common;

use std::time::{Duration, Instant};

use common::*;
use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use riffle::ConnectorErrorKind;
use riffle::record::Record;
use riffle::sink::{Sink, SinkWriter};
use riffle_kafka::KafkaSink;

/// A writer of subtask 0 (of 1) of job `job`, writing numbers to `topic` with `pool` producers.
fn writer(
    topic: &str,
    job: &str,
    pool: usize,
    broker_timeout: Duration,
) -> Box<dyn SinkWriter<u64>> {
    let sink = KafkaSink::<u64>::json(kafka(), topic)
        .exactly_once()
        .transaction_pool(pool)
        .broker_timeout(broker_timeout);
    let mut ctx = riffle_testing::operator_context("sink", "run", 0, 1);
    ctx.job_name = job.to_string();
    sink.writer(&ctx).unwrap()
}

fn batch(range: std::ops::Range<u64>) -> Vec<Record<u64>> {
    range.map(Record::untimed).collect()
}

/// The committed numbers of `topic`, read until `expected` came or 20 s passed.
fn committed_numbers(topic: &str, expected: usize) -> Vec<u64> {
    let mut numbers: Vec<u64> =
        read_committed(topic, Duration::from_secs(20), |n, _| n >= expected)
            .iter()
            .map(|r| r.value.parse().unwrap())
            .collect();
    numbers.sort();
    numbers
}

#[test]
fn two_jobs_writing_the_same_topic_with_the_same_prefix_do_not_fence_each_other() {
    let topic = topic("two-jobs", 1);
    let timeout = Duration::from_secs(20);
    let mut a = writer(&topic, "job-a", 2, timeout);
    a.recover(Vec::new()).unwrap();
    a.write(&mut batch(0..10)).unwrap();
    // Job B starts while A's transaction is open: same topic, operator id and default prefix.
    let mut b = writer(&topic, "job-b", 2, timeout);
    b.recover(Vec::new()).unwrap();
    b.write(&mut batch(100..110)).unwrap();
    a.pre_commit(1).unwrap();
    a.commit(1).unwrap();
    b.pre_commit(1).unwrap();
    b.commit(1).unwrap();
    let expected: Vec<u64> = (0..10).chain(100..110).collect();
    assert_eq!(committed_numbers(&topic, expected.len()), expected);

    // A second instance of the *same* job fences the first: its commit fails, typed as fenced.
    a.write(&mut batch(10..20)).unwrap();
    a.pre_commit(2).unwrap();
    let mut a2 = writer(&topic, "job-a", 2, timeout);
    a2.recover(Vec::new()).unwrap();
    let err = a.commit(2).unwrap_err();
    assert_eq!(
        err.connector_kind(),
        Some(ConnectorErrorKind::Fenced),
        "{err}"
    );
    assert!(
        err.to_string().starts_with(&format!(
            "kafka: cannot commit the transaction of `riffle-{topic}-sink-job-a-0-"
        )),
        "{err}"
    );
    assert_eq!(committed_numbers(&topic, expected.len()), expected);
}

#[test]
fn ids_beyond_a_pool_that_shrank_are_fenced_on_restore() {
    let topic = topic("shrunk-pool", 1);
    let timeout = Duration::from_secs(20);
    // A job with 4 producers: checkpoints 1..3 pre-commit 0..30 on slots 0..2, and 30..40 go
    // into a transaction on slot 3; then the process dies (no commit, no abort).
    let mut first = writer(&topic, "shrink", 4, timeout);
    first.recover(Vec::new()).unwrap();
    let mut committable = None;
    for checkpoint in 1..=3u64 {
        let from = (checkpoint - 1) * 10;
        first.write(&mut batch(from..from + 10)).unwrap();
        committable = first.pre_commit(checkpoint).unwrap();
    }
    first.write(&mut batch(30..40)).unwrap();
    first.flush().unwrap();
    std::thread::sleep(Duration::from_millis(100)); // past linger.ms: the records are out
    first.flush().unwrap();
    std::mem::forget(first);

    // The job restarts from checkpoint 3 with 2 producers: it repairs the three pre-committed
    // transactions and fences slots 2 and 3, so the open transaction of slot 3 is aborted and
    // holds no read_committed reader back: what the job commits next is readable at once.
    let mut second = writer(&topic, "shrink", 2, timeout);
    second.recover(vec![committable.unwrap()]).unwrap();
    second.write(&mut batch(40..50)).unwrap();
    second.pre_commit(4).unwrap();
    second.commit(4).unwrap();
    let expected: Vec<u64> = (0..30).chain(40..50).collect();
    let started = Instant::now();
    assert_eq!(committed_numbers(&topic, expected.len()), expected);
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[test]
fn the_recovery_scan_gives_up_after_the_broker_timeout() {
    let topic = topic("scan-timeout", 1);
    // Another producer's transaction stays open at the start of the partition: read_committed
    // readers see nothing past it.
    let blocker: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("transactional.id", format!("{topic}-blocker"))
        .create()
        .unwrap();
    blocker.init_transactions(Duration::from_secs(20)).unwrap();
    blocker.begin_transaction().unwrap();
    blocker
        .send(
            BaseRecord::<[u8], [u8]>::to(&topic)
                .partition(0)
                .payload(b"1000".as_slice()),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    blocker.flush(Duration::from_secs(20)).unwrap();

    // Checkpoint 1 pre-commits a transaction after it; the process dies before the commit.
    let mut first = writer(&topic, "scan", 2, Duration::from_secs(20));
    first.recover(Vec::new()).unwrap();
    first.write(&mut batch(0..10)).unwrap();
    let committable = first.pre_commit(1).unwrap().unwrap();
    std::mem::forget(first);

    // The restore cannot tell whether that transaction committed; it gives up after 3 s, not 60.
    let mut second = writer(&topic, "scan", 2, Duration::from_secs(3));
    let started = Instant::now();
    let err = second.recover(vec![committable]).unwrap_err();
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(3) && waited < Duration::from_secs(20),
        "{waited:?}"
    );
    assert_eq!(err.connector_kind(), Some(ConnectorErrorKind::Retriable));
    assert_eq!(
        err.to_string(),
        format!(
            "kafka: sink recovery could not read {topic}-0 from offset 1: nothing readable within \
             the broker timeout (3s): an open transaction of another producer holds \
             read_committed readers back, or the broker is unreachable"
        )
    );
    blocker.abort_transaction(Duration::from_secs(20)).unwrap();
}
